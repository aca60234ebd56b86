"""Timing whole commands side by side: what a command is, running it once, the warm-up and the
rotating rounds, and the markdown table of medians, spreads and ratios to a baseline.

Also the few things every section shares: the repository root the commands run in, the
environment they run with, the time limit of one run, and the formatting helpers (``iqr``,
``table``, ``last_line``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_SECONDS = 600.0
# Commands run as on a user's machine, where Python caches compiled bytecode (pip compiles it at
# install; an editable install writes it on first run). With PYTHONDONTWRITEBYTECODE set, as on
# some CI machines, every run would compile gradexplain's sources again while the baselines'
# libraries come precompiled, which is not what a user sees.
COMMAND_ENV = {name: value for name, value in os.environ.items()
               if name != "PYTHONDONTWRITEBYTECODE"}
MB = 1_000_000


@dataclass
class Command:
    """One command line to time; ``stdout_to`` is a file to keep its output in, or None, and
    ``env`` the variables it runs with on top of ``COMMAND_ENV`` (a shell's completion request)."""

    label: str
    argv: list[str]
    stdout_to: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    failure: str | None = None

    def median(self) -> float:
        return statistics.median(self.times)


@dataclass
class Outcome:
    """How one run of a command ended: its wall time and its peak resident set in bytes (0
    where the platform does not say), or what went wrong."""

    seconds: float
    failure: str | None
    peak: int = 0


def launcher() -> tuple[list[str], str]:
    """The argv prefix that runs gradexplain, and a sentence saying which one it is."""
    scripts = Path(sysconfig.get_path("scripts"))
    for name in ("gradexplain", "gradexplain.exe"):
        script = scripts / name
        if script.is_file():
            return [str(script)], f"console script {script}"
    found = shutil.which("gradexplain")
    if found is not None:
        return [found], f"console script {found} (from PATH)"
    return [sys.executable, "-m", "gradexplain"], f"{sys.executable} -m gradexplain"


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output on stderr)"


def run_once(command: Command) -> Outcome:
    """Run a command once with stdout to its file (or discarded); time it, take its peak
    resident set (the child's own, from wait4, where there is one), and say if it failed."""
    with contextlib.ExitStack() as stack:
        sink = (stack.enter_context(command.stdout_to.open("wb"))
                if command.stdout_to is not None else subprocess.DEVNULL)
        stderr = stack.enter_context(tempfile.TemporaryFile())
        try:
            start = time.perf_counter()
            proc = subprocess.Popen(command.argv, stdin=subprocess.DEVNULL, stdout=sink,
                                    stderr=stderr, cwd=REPO, env={**COMMAND_ENV, **command.env})
        except OSError as error:
            return Outcome(0.0, f"could not start: {error}")
        code, peak, timed_out = _wait(proc)
        seconds = time.perf_counter() - start
        if timed_out:
            return Outcome(TIMEOUT_SECONDS, f"timed out after {TIMEOUT_SECONDS:.0f} s")
        if code != 0:
            stderr.seek(0)
            said = stderr.read().decode("utf-8", errors="replace")
            return Outcome(seconds, f"exit code {code}: {last_line(said)}")
        return Outcome(seconds, None, peak)


def _wait(proc: subprocess.Popen[bytes]) -> tuple[int, int, bool]:
    """Wait for `proc`, killing it past TIMEOUT_SECONDS: its exit code, its peak resident set
    in bytes (0 where there is no wait4), and whether it was killed for taking too long. A
    blocking wait, so that the time measured is the command's, not a polling interval's."""
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    killer = threading.Timer(TIMEOUT_SECONDS, kill)
    killer.start()
    try:
        if not hasattr(os, "wait4"):
            return proc.wait(), 0, killed.is_set()
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: KiB on Linux, bytes on macOS
    return proc.returncode, usage.ru_maxrss * scale, killed.is_set()


def measure(commands: Sequence[Command], rounds: int) -> None:
    """One warm-up run each, then ``rounds`` round-robin rounds, the order rotating each round.

    A command that fails (in the warm-up or later) is recorded as failed and not run again.
    """
    for command in commands:
        outcome = run_once(command)
        command.failure = outcome.failure
    for index in range(rounds):
        shift = index % len(commands)
        for command in list(commands[shift:]) + list(commands[:shift]):
            if command.failure is not None:
                continue
            outcome = run_once(command)
            if outcome.failure is not None:
                command.failure = outcome.failure
            else:
                command.times.append(outcome.seconds)
                command.peaks.append(outcome.peak)
        print(f"  round {index + 1}/{rounds} done", file=sys.stderr, flush=True)


def iqr(times: Sequence[float], scale: float = 1.0, digits: int = 3) -> str:
    if len(times) < 2:
        return "-"
    quartiles = statistics.quantiles(times, n=4, method="inclusive")
    return f"{quartiles[0] * scale:.{digits}f}-{quartiles[2] * scale:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ratio_section(
    title: str,
    baseline: Command,
    others: Sequence[tuple[Command, float | None]],
    rounds: int,
    budget_name: str,
) -> tuple[list[str], bool]:
    """Time a baseline and commands side by side: the lines of a markdown table, and whether
    every command ran successfully.

    Each of ``others`` pairs a command with its budget (a ratio to the baseline) or None.
    """
    commands = [baseline] + [command for command, _ in others]
    print(f"{title}: {len(commands)} commands, {rounds} rounds", file=sys.stderr, flush=True)
    measure(commands, rounds)
    out = [f"## {title}", ""]
    problems: list[str] = []
    rows: list[list[str]] = []
    base = baseline.median() if baseline.failure is None and baseline.times else None
    for command, budget in [(baseline, None), *others]:
        if command.failure is not None or not command.times:
            problems.append(f"- FAILED: `{command.label}`: {command.failure or 'no runs'}")
            rows.append([f"`{command.label}`", "0", "failed", "-", "-", "-"])
            continue
        median = command.median()
        ratio, verdict = against_baseline(median, base, budget, command is baseline)
        rows.append([f"`{command.label}`", str(len(command.times)), f"{median:.3f}",
                     iqr(command.times), ratio, verdict])
    out.append(table(["command", "runs", "median (s)", "p25-p75 (s)", "x baseline",
                      budget_name], rows))
    if problems:
        out += ["", *problems]
    return out, not problems


def against_baseline(
    median: float, base: float | None, budget: float | None, is_baseline: bool
) -> tuple[str, str]:
    """A command's median as a ratio to the baseline's, and whether it is within its budget:
    the last two cells of its row in ``ratio_section``."""
    if is_baseline:
        return "1.00x (baseline)", "-"
    if base is None:
        return "-", "no baseline"
    value = median / base
    if budget is None:
        return f"{value:.2f}x", "-"
    return f"{value:.2f}x", f"{'met' if value <= budget else 'NOT met'} (<= {budget:.2f}x)"
