"""Instructions per `explain(model, x)` call, counted by valgrind's callgrind, for the working
tree against another revision: the one measure of a capture's CPU work that does not move with
the machine's load.

These machines are shared: a capture's time moves by 5-10% from one run to the next, more than
most single changes save, so `bench.py`'s ratios cannot tell a 2% step from noise. Callgrind
counts the instructions a process executes, which the load does not change (Python's hash
seed is fixed; what is left to chance is below). What it cannot see is time that is not
instructions: page faults, cache misses, waiting on memory (a capture that copies less may be
faster by more than its count says). So this says whether a change does less work; `bench.py`
says what that is worth.

Each tree is counted as two processes under callgrind, one making a warm-up call (imports,
first-call set-up) and one making the warm-up and `--calls` more; the difference divided by
`--calls` is one steady-state call. Four processes in all, two at a time: about 8 minutes for
the MLP on one of these machines (callgrind runs code 30-50 times slower). The count is not
quite exact: the same code counted twice this way came out 0.4% apart, so a step has to change
it by more than that to show (more `--calls` narrow it).

    python bench/instructions.py                      # the MLP, HEAD against the working tree
    python bench/instructions.py --model resnet18 --base HEAD~3 --calls 1

It owns the child process's script, running it under callgrind and reading its count.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from peer_models import MODELS
from timing import REPO

# What each process under callgrind runs: the tree given first on sys.path, so its gradexplain
# is the one imported (checked), the model built as the Python API section builds it.
CHILD = """
import copy, sys
tree, bench, name, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path[:0] = [tree, bench]
import torch
torch.set_num_threads(1)
import gradexplain
from gradexplain import explain
from peer_models import MODELS
assert gradexplain.__file__.startswith(tree), gradexplain.__file__
model, x = next(item for item in MODELS if item.name == name).build()
for _ in range(1 + calls):
    explain(copy.deepcopy(model), x.detach().clone().requires_grad_(True))
"""
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=[item.name for item in MODELS], default="mlp50")
    parser.add_argument("--base", default="HEAD", help="the revision to compare with")
    parser.add_argument("--calls", type=int, default=2, help="calls counted after the warm-up")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing to count with", file=sys.stderr)
        return 2
    if args.calls < 1:
        print("--calls must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        base, work = Path(scratch) / "base", Path(scratch) / "work"
        added = subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(base),
                                args.base], cwd=REPO, capture_output=True, text=True, check=False)
        if added.returncode != 0:
            print(f"cannot check out {args.base!r}: {added.stderr.strip()}", file=sys.stderr)
            return 2
        try:
            # The working tree's package copied beside the revision's, under a path of the
            # same length, so that where a tree lies is no difference between them.
            shutil.copytree(REPO / "gradexplain", work / "gradexplain",
                            ignore=shutil.ignore_patterns("__pycache__"))
            trees = {args.base: base, "working tree": work}
            jobs = [(label, calls) for label in trees for calls in (0, args.calls)]
            with ThreadPoolExecutor(2) as pool:
                counts = dict(zip(jobs, pool.map(
                    lambda job: count(trees[job[0]], args.model, job[1]), jobs), strict=True))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=REPO,
                           check=False)
    per_call = {label: (counts[(label, args.calls)] - counts[(label, 0)]) / args.calls
                for label in trees}
    reference = per_call[args.base]
    calls = f"{args.calls} call{'s' if args.calls > 1 else ''}"
    print(f"instructions per explain() of {args.model} ({calls} after a warm-up):")
    for label, instructions in per_call.items():
        print(f"- {label}: {instructions / 1e6:,.1f} M ({instructions / reference:.4f}x)")
    return 0


def count(tree: Path, model: str, calls: int) -> int:
    """Instructions of a process making a warm-up call and `calls` more."""
    found = subprocess.run(
        ["valgrind", "--tool=callgrind", "--cache-sim=no", "--branch-sim=no",
         "--callgrind-out-file=/dev/null", sys.executable, "-c", CHILD, str(tree),
         str(REPO / "bench"), model, str(calls)],
        env={**os.environ, "PYTHONHASHSEED": "0"}, cwd=tempfile.gettempdir(),
        capture_output=True, text=True, check=False)
    match = COLLECTED.search(found.stderr)
    if found.returncode != 0 or match is None:
        raise SystemExit(f"{tree}: the counted process failed: {found.stderr[-2000:]}")
    return int(match.group(1))


if __name__ == "__main__":
    sys.exit(main())
