"""Every speed figure the README quotes, each as a ratio measured side by side in one run.

What it measures (wall time of whole processes, as a user at a shell sees them):

1. Start-up: ``gradexplain --help``, ``gradexplain validate specs/two_modules.yaml`` and a bash
   completion request against ``python -c "import typer, rich, yaml"`` (the libraries the
   command line cannot avoid).
   Budget (issue 7): within 1.5x the baseline.
2. Walk latency: ``gradexplain walk specs/two_modules.yaml`` (text, and ``--format json``)
   against ``python -c "import torch"``. Budgets: text within 1.15x the baseline (issue 20), JSON
   within 1.25x (issue 3).
3. Scaling: ``gradexplain walk FILE --format json`` on generated specs of 10, 100 and 300
   Linear+Tanh layers, with the JSON's size, against the 10-layer walk and against
   ``python -c "import torch"`` timed in the same rounds. Targets (issue 3): 300 layers in under
   10 s in total, JSON under 50 MB. The 10 s target is absolute seconds, so it depends on the
   machine and on its load; the "x import torch" column says how it would scale elsewhere.
4. Large models: the 300-layer spec walked as JSON, as text (the default) and as text with every
   timeline and block; and a 1,000-layer spec (500 Linear + Tanh pairs) as JSON, with each
   command's peak resident set (from wait4) and output size. Goals (issue 20): text at most
   1.2x JSON's time; 1,000 layers with JSON under 50 MB and a peak RSS under 1 GB.
5. Python API (in this process, not whole commands): ``explain(model, x)`` on each model of
   ``peer_models.py`` (the README's 50-layer MLP, Linear(256, 256) + ReLU blocks at batch 32,
   and a ResNet-18 on one 64x64 image) against a plain forward + backward of it ("plain"),
   against the same two hooked passes gradexplain makes with every hook it registers doing
   nothing ("floor", registering and removing them included) and with every hook cloning what
   it is handed ("clone floor"), and against torchlens recording the model with its gradients
   when it is installed (`pip install -e '.[bench]'`); the text and JSON renderings as ratios
   to the capture; hook calls, checks, and the Python heap peak (``tracemalloc``) of a capture
   against the floor's. Goals (issue 20): a capture within torchlens's time and within 3x the
   clone floor.

6. Distributed: ``gradexplain walk specs/ddp_hooks.yaml --ranks 2`` (DDP) and ``--wrap fsdp``
   (FSDP2) against the single-process ``gradexplain walk specs/ddp_hooks.yaml``. Goal (issue
   21): within 2x. The ranks are forked from the walk's process after it has imported torch and
   ``torch._dynamo`` (which DDP's constructor imports on first use).
7. Threads: ``gradexplain walk examples/models.py:make_deep --input 32x256 --format json``
   with one torch thread (the default, issue 15) against ``--threads N`` with N the number of
   CPUs (torch's own default), and whether both print the same bytes.

How it measures: machines are shared and noisy, so absolute times drift from minute to minute.
Within a section every command runs once to warm caches (and to find commands that fail), then
all commands run in round-robin rounds, the order rotating each round, so drift hits every
command alike. Each table gives the median and the interquartile range (p25-p75) of the rounds
and the ratio of the command's median to the baseline's median ("x baseline", 1.00x for the
baseline itself). Read the ratios, not the seconds: the ratios are what carry over to another
machine. Commands run with bytecode caching on, as on a user's machine
(``PYTHONDONTWRITEBYTECODE`` is dropped from their environment). Nothing here asserts on times:
budgets and targets are printed as met or not met. A command that exits non-zero (or runs over
10 minutes) is reported as FAILED with the last line of its stderr, and the script then exits 1
after printing everything else.

The ``gradexplain`` console script installed next to this Python is timed, as users run it
(a version manager's shim on PATH, such as pyenv's, would add its own start-up to every
command, so the script itself is used); without one, ``python -m gradexplain``. The baselines
run on this same Python (``sys.executable``).

The Python API section times function calls instead of commands, in the same way: a warm-up,
then rounds in rotating order of its units (plain x5, floor x5, clone floor x5, torchlens, and
a capture followed by its two renderings, after which the Explanation is dropped), with a
``gc.collect()`` before each unit (outside any time). Setup such as copying the model is outside
the times too; the capture's copy is inside, being part of ``explain``. For each model, its
rounds stop early (after at least 2) when another, and the memory and hook counts after them,
would take it past 70 s (a capture is slow on a busy machine); the section says how many ran.
It runs torch on one intra-op thread (``--torch-threads``): a batch of 32 gains little from
more, and on a shared machine they stall (seen: a 12 ms plain forward + backward taking 2 s with
torch's default of 2 threads, at a load average of 4 on 2 CPUs), which buries the ratios in
noise. ``explain`` is called with
``threads=None`` so that this one setting governs the capture as well as the plain and floor
passes (by default ``explain`` would use one thread whatever the setting). Its calls are timed
by wall time; ``--clock cpu`` times them by the process's CPU time instead (page faults count,
waiting for a CPU the machine's other work holds does not), which issue 20's figures were
first given in.

Run from anywhere (it changes to the repository root): ``python bench/bench.py``, or
``python bench/bench.py --quick`` for a smoke test with few repetitions.

The code: this file is the entry point (options, the header, the sections in order);
``timing.py`` times commands side by side and formats the tables; ``command_sections.py`` holds
the sections that time commands (start-up, walk, sessions, scaling, large models, threads);
``python_section.py`` the Python API section and ``peer_models.py`` its models. They import each
other as siblings: run this file as a script, not as a module of a package.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from command_sections import (
    distributed_section,
    large_section,
    scaling_section,
    session_section,
    startup_section,
    threads_section,
    walk_section,
)
from python_section import CLOCKS, PYTHON_BUDGET_SECONDS, python_section
from timing import REPO, last_line, launcher

# Every section, in the order they run (whatever the order of --only).
SECTIONS = ("startup", "walk", "distributed", "session", "scaling", "large", "python",
            "threads")
Section = Callable[[], tuple[list[str], bool]]


@dataclass
class Settings:
    """What the command line asks for, defaults applied. ``python_budget`` is the Python API
    section's time budget in seconds, or None when its rounds were given (then all of them
    run); ``torch_threads`` 0 leaves torch's own default; ``clock`` is what the Python API
    section times by (a key of ``CLOCKS``)."""

    sections: list[str]
    rounds: int
    scaling_rounds: int
    python_rounds: int
    python_budget: float | None
    torch_threads: int
    clock: str


def parse_args(argv: Sequence[str] | None) -> Settings:
    """The options (``--help`` lists them), checked, with their defaults applied."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="few repetitions, for a smoke test (the figures are rough)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds for the start-up and walk sections (default 20, quick 3)")
    parser.add_argument("--scaling-rounds", type=int, default=None,
                        help="rounds for the scaling section (default 5, quick 1)")
    parser.add_argument("--python-rounds", type=int, default=None,
                        help="rounds for the Python API section (default up to 10 within "
                             f"{PYTHON_BUDGET_SECONDS:.0f} s, quick 2; given: all of them)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch.set_num_threads for the Python API section (default 1; "
                             "0: torch's own default)")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="what the Python API section times: wall time (default), or the "
                             "process's CPU time, which a busy machine's other work does not "
                             "add to")
    parser.add_argument("--only", choices=list(SECTIONS),
                        action="append",
                        help="run only this section (repeatable)")
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 20)
    scaling_rounds = (args.scaling_rounds if args.scaling_rounds is not None
                      else (1 if args.quick else 5))
    python_rounds = (args.python_rounds if args.python_rounds is not None
                     else (2 if args.quick else 10))
    if rounds < 1 or scaling_rounds < 1 or python_rounds < 1:
        parser.error("rounds must be at least 1")
    if args.torch_threads < 0:
        parser.error("--torch-threads must be 0 (torch's default) or more")
    return Settings(
        sections=args.only or list(SECTIONS),
        rounds=rounds,
        scaling_rounds=scaling_rounds,
        python_rounds=python_rounds,
        python_budget=PYTHON_BUDGET_SECONDS if args.python_rounds is None else None,
        torch_threads=args.torch_threads,
        clock=args.clock,
    )


def probe(argv: list[str]) -> str:
    """The first line a short command prints, or why it printed nothing."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unavailable ({error})"
    if proc.returncode != 0:
        return f"unavailable (exit code {proc.returncode}: {last_line(proc.stderr)})"
    return proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else "(no output)"


def header(gx_note: str, gx: list[str], rounds: dict[str, int]) -> list[str]:
    """The report's first lines: the machine, the versions, the rounds of each section asked
    for, and the date."""
    cpus = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "-"
    torch_version = probe([sys.executable, "-c", "import torch; print(torch.__version__)"])
    version = probe([*gx, "--version"])
    return [
        "# gradexplain benchmark",
        "",
        f"- python {platform.python_version()} ({sys.executable}), {platform.platform()}",
        f"- torch {torch_version}",
        f"- gradexplain: {version}; run as {gx_note}",
        f"- CPUs: {cpus} ({usable} usable by this process); load average at start: {load}",
        "- rounds per section: " + ", ".join(f"{k} {v}" for k, v in rounds.items())
        + " (after one warm-up run of each command)",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
    ]


def in_workdir(
    section: Callable[[list[str], int, Path], tuple[list[str], bool]], gx: list[str], rounds: int
) -> tuple[list[str], bool]:
    """Run a section that writes files in a temporary directory, removed once it is done."""
    with tempfile.TemporaryDirectory(prefix="gradexplain-bench-") as tmp:
        return section(gx, rounds, Path(tmp))


def python_api(settings: Settings) -> tuple[list[str], bool]:
    """The Python API section, with torch on the threads asked for."""
    if settings.torch_threads > 0:
        import torch

        torch.set_num_threads(settings.torch_threads)
    return python_section(settings.python_rounds, settings.python_budget, settings.clock)


def section_runs(gx: list[str], settings: Settings) -> dict[str, Section]:
    """Each section by name (in ``SECTIONS`` order), ready to run with its rounds."""
    rounds, scaling_rounds = settings.rounds, settings.scaling_rounds
    return {
        "startup": lambda: startup_section(gx, rounds),
        "walk": lambda: walk_section(gx, rounds),
        "distributed": lambda: distributed_section(gx, rounds),
        "session": lambda: in_workdir(session_section, gx, rounds),
        "scaling": lambda: in_workdir(scaling_section, gx, scaling_rounds),
        "large": lambda: in_workdir(large_section, gx, scaling_rounds),
        "python": lambda: python_api(settings),
        "threads": lambda: in_workdir(threads_section, gx, scaling_rounds),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print the header, then each section asked for as it finishes; 1 if a command failed."""
    settings = parse_args(argv)
    os.chdir(REPO)
    gx, gx_note = launcher()
    section_rounds = {"scaling": settings.scaling_rounds, "large": settings.scaling_rounds,
                      "python": settings.python_rounds,
                      "threads": settings.scaling_rounds}
    shown_rounds = {name: section_rounds.get(name, settings.rounds)
                    for name in settings.sections}
    print("\n".join(header(gx_note, gx, shown_rounds)), flush=True)
    all_ran = True
    for name, run in section_runs(gx, settings).items():
        if name in settings.sections:
            lines, ran = run()
            print("\n" + "\n".join(lines), flush=True)
            all_ran = all_ran and ran

    if hasattr(os, "getloadavg"):
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"\nLoad average at the end: {load} (on {os.cpu_count()} CPUs).", flush=True)
    if not all_ran:
        print("\nSome commands failed (see FAILED above); their figures are missing.", flush=True)
    return 0 if all_ran else 1


if __name__ == "__main__":
    sys.exit(main())
