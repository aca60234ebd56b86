"""Determinism: the same spec gives byte-identical output in two separate processes, for every
spec and every output (walk as text at a fixed width, JSON and markdown; diff; report).

Each process runs the real entry point (`gradexplain.cli.main`) once per spec and output and
writes what it printed to a folder. The two processes run with different hash seeds, so output
that depended on the order of a set or of a dict built from one would differ between them, and
with different thread settings (OMP_NUM_THREADS and MKL_NUM_THREADS 1 and 2), so output that
depended on how torch split its work between threads would too.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli import REPO, SPECS

SPEC_FILES = sorted(path.name for path in SPECS.glob("*.yaml"))

COMMANDS: dict[str, list[str]] = {
    "walk.txt": ["walk"],
    "walk.json": ["walk", "--format", "json"],
    "walk.md": ["walk", "--format", "markdown"],
    "diff.txt": ["diff"],
    "report.md": ["report"],
}

# Runs every command on every spec in one interpreter (torch is imported once); each output goes
# to OUT/<spec>.<command>, with the exit code on its first line.
CHILD = """
import contextlib, io, json, sys
from pathlib import Path
from gradexplain.cli import main

out, specs, commands = Path(sys.argv[1]), sys.argv[2].split(","), json.loads(sys.argv[3])
for spec in specs:
    for name, args in commands.items():
        sys.argv = ["gradexplain", *args[:1], "specs/" + spec, *args[1:]]
        printed, errors = io.StringIO(), io.StringIO()
        code = 0
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
            try:
                main()
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 1
        text = f"exit {code}\\n{printed.getvalue()}--- stderr\\n{errors.getvalue()}"
        (out / f"{spec}.{name}").write_text(text, encoding="utf-8")
"""


def run_all(out: Path, hash_seed: str, threads: str) -> subprocess.Popen[str]:
    out.mkdir()
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "NO_COLOR": "1", "COLUMNS": "100",
           "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), ",".join(SPEC_FILES), json.dumps(COMMANDS)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_every_output_is_byte_identical_across_processes(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    # Side by side: the two runs take a minute between them on one CPU, half that on two.
    children = [run_all(first, "1", threads="1"), run_all(second, "2", threads="2")]
    for child in children:
        _, stderr = child.communicate(timeout=900)
        assert child.returncode == 0, stderr
    names = sorted(path.name for path in first.iterdir())
    assert names == sorted(path.name for path in second.iterdir())
    assert len(names) == len(SPEC_FILES) * len(COMMANDS)
    for name in names:
        one = (first / name).read_text(encoding="utf-8")
        other = (second / name).read_text(encoding="utf-8")
        if one != other:
            changes = "".join(list(difflib.unified_diff(
                one.splitlines(keepends=True), other.splitlines(keepends=True),
                "hash seed 1, 1 thread", "hash seed 2, 2 threads"))[:40])
            raise AssertionError(f"{name} differs between processes:\n{changes}")
        # Something real was compared: every spec walks (exit 0) with output on stdout
        # (counted in characters: JSON is one line).
        head, _, rest = one.partition("\n")
        printed = rest.split("--- stderr\n")[0]
        assert head == "exit 0", (name, one[-500:])
        assert len(printed) > 200, (name, printed)


def test_text_is_laid_out_at_the_fixed_width(tmp_path: Path) -> None:
    # Piped output is 100 columns whatever the terminal says, so COLUMNS cannot change it.
    outputs = []
    for columns in ("60", "200"):
        done = subprocess.run(
            [sys.executable, "-m", "gradexplain", "walk", "specs/cnn_hooks.yaml"],
            cwd=REPO, env={**os.environ, "COLUMNS": columns, "NO_COLOR": "1"},
            capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    widest = max(len(line) for line in outputs[0].splitlines())
    assert 80 < widest <= 100
