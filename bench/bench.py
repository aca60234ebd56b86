"""Every speed figure the README quotes, each as a ratio measured side by side in one run.

What it measures (wall time of whole processes, as a user at a shell sees them):

1. Start-up: ``gradexplain --help`` and ``gradexplain validate specs/two_modules.yaml`` against
   ``python -c "import typer, rich, yaml"`` (the libraries the command line cannot avoid).
   Budget (issue 7): within 1.5x the baseline.
2. Walk latency: ``gradexplain walk specs/two_modules.yaml`` (text, and ``--format json``)
   against ``python -c "import torch"``. Budget (issue 3): within 1.25x the baseline.
3. Scaling: ``gradexplain walk FILE --format json`` on generated specs of 10, 100 and 300
   Linear+Tanh layers, with the JSON's size, against the 10-layer walk and against
   ``python -c "import torch"`` timed in the same rounds. Targets (issue 3): 300 layers in under
   10 s in total, JSON under 50 MB. The 10 s target is absolute seconds, so it depends on the
   machine and on its load; the "x import torch" column says how it would scale elsewhere.

How it measures: machines are shared and noisy, so absolute times drift from minute to minute.
Within a section every command runs once to warm caches (and to find commands that fail), then
all commands run in round-robin rounds, the order rotating each round, so drift hits every
command alike. Each table gives the median and the interquartile range (p25-p75) of the rounds
and the ratio of the command's median to the baseline's median ("x baseline", 1.00x for the
baseline itself). Read the ratios, not the seconds: the ratios are what carry over to another
machine. Nothing here asserts on times: budgets and targets are printed as met or not met. A
command that exits non-zero (or runs over 10 minutes) is reported as FAILED with the last line of
its stderr, and the script then exits 1 after printing everything else.

The ``gradexplain`` console script installed next to this Python is timed, as users run it
(a version manager's shim on PATH, such as pyenv's, would add its own start-up to every
command, so the script itself is used); without one, ``python -m gradexplain``. The baselines
run on this same Python (``sys.executable``).

Run from anywhere (it changes to the repository root): ``python bench/bench.py``, or
``python bench/bench.py --quick`` for a smoke test with few repetitions.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TWO_MODULES = "specs/two_modules.yaml"
STARTUP_BUDGET = 1.5
WALK_BUDGET = 1.25
SCALING_LAYERS = (10, 100, 300)
TARGET_SECONDS = 10.0
TARGET_MB = 50.0
TIMEOUT_SECONDS = 600.0
MB = 1_000_000


@dataclass
class Command:
    """One command line to time; ``stdout_to`` is a file to keep its output in, or None."""

    label: str
    argv: list[str]
    stdout_to: Path | None = None
    times: list[float] = field(default_factory=list)
    failure: str | None = None

    def median(self) -> float:
        return statistics.median(self.times)


@dataclass
class Outcome:
    """How one run of a command ended: its wall time, or what went wrong."""

    seconds: float
    failure: str | None


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
    """Run a command once with stdout to its file (or discarded); time it, and say if it failed."""
    sink = command.stdout_to.open("wb") if command.stdout_to is not None else None
    try:
        start = time.perf_counter()
        proc = subprocess.run(
            command.argv,
            stdin=subprocess.DEVNULL,
            stdout=sink if sink is not None else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=REPO,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
        seconds = time.perf_counter() - start
    except subprocess.TimeoutExpired:
        return Outcome(TIMEOUT_SECONDS, f"timed out after {TIMEOUT_SECONDS:.0f} s")
    except OSError as error:
        return Outcome(0.0, f"could not start: {error}")
    finally:
        if sink is not None:
            sink.close()
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", errors="replace")
        return Outcome(seconds, f"exit code {proc.returncode}: {last_line(stderr)}")
    return Outcome(seconds, None)


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
        print(f"  round {index + 1}/{rounds} done", file=sys.stderr, flush=True)


def iqr(times: Sequence[float]) -> str:
    if len(times) < 2:
        return "-"
    quartiles = statistics.quantiles(times, n=4, method="inclusive")
    return f"{quartiles[0]:.3f}-{quartiles[2]:.3f}"


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
        if command is baseline:
            ratio, verdict = "1.00x (baseline)", "-"
        elif base is None:
            ratio, verdict = "-", "no baseline"
        else:
            value = median / base
            ratio = f"{value:.2f}x"
            if budget is None:
                verdict = "-"
            else:
                verdict = f"{'met' if value <= budget else 'NOT met'} (<= {budget:.2f}x)"
        rows.append([f"`{command.label}`", str(len(command.times)), f"{median:.3f}",
                     iqr(command.times), ratio, verdict])
    out.append(table(["command", "runs", "median (s)", "p25-p75 (s)", "x baseline",
                      budget_name], rows))
    if problems:
        out += ["", *problems]
    return out, not problems


def session_section(gx: list[str], rounds: int, workdir: Path) -> tuple[list[str], bool]:
    """Capture once, render many: `report --load` of a saved session beside a fresh `report`
    of the same spec (the largest example), and the session's size."""
    spec = "specs/cnn_hooks.yaml"
    saved = workdir / "run.json"
    done = subprocess.run([*gx, "walk", spec, "--save", str(saved), "--format", "json"],
                          capture_output=True, timeout=TIMEOUT_SECONDS, check=False)
    if done.returncode != 0:
        reason = last_line(done.stderr.decode())
        return ["## Sessions", "", f"- FAILED: walk --save: {reason}"], False
    lines, ran = ratio_section(
        "Sessions: render a saved one vs run the spec again",
        Command(f"gradexplain report {spec} > /dev/null", [*gx, "report", spec]),
        [(Command("gradexplain report --load run.json > /dev/null",
                  [*gx, "report", "--load", str(saved)]), None)],
        rounds, "budget")
    lines += ["", f"Session file of {spec}: {saved.stat().st_size / MB:.1f} MB."]
    return lines, ran


def make_mlp_spec(layers: int, width: int = 8) -> str:
    """YAML text of a spec: ``layers`` Linear(width, width) + Tanh pairs, then a sum, backward.

    Layer names ``l0, l1, ...`` (Linear) and ``a0, a1, ...`` (Tanh); step results ``h0, ...``
    (Linear outputs) and ``t0, ...`` (Tanh outputs); the input ``x`` is a batch of 4.
    """
    if layers < 1:
        raise ValueError(f"an MLP needs at least one layer, got {layers}")
    lines = [
        f"name: mlp_{layers}",
        f"about: {layers} Linear({width}, {width}) + Tanh layers, summed (bench/bench.py).",
        "seed: 0",
        "inputs:",
        f"  x: {{randn: [4, {width}], requires_grad: true}}",
        "layers:",
    ]
    for i in range(layers):
        lines.append(f"  l{i}: {{Linear: {{in_features: {width}, out_features: {width}}}}}")
        lines.append(f"  a{i}: Tanh")
    lines.append("forward:")
    previous = "x"
    for i in range(layers):
        lines.append(f'  - "h{i} = l{i}({previous})"')
        lines.append(f'  - "t{i} = a{i}(h{i})"')
        previous = f"t{i}"
    lines.append(f'  - "loss = sum({previous})"')
    lines.append("backward: loss")
    return "\n".join(lines) + "\n"


def scaling_section(gx: list[str], rounds: int, workdir: Path) -> tuple[list[str], bool]:
    """Walk generated specs of each size side by side: seconds, JSON MB, ratios and targets as
    lines of markdown, and whether every command ran successfully.

    ``python -c "import torch"`` runs in the same rounds, so that the absolute 10 s target can
    also be read as a ratio on a machine slower or busier than the one it was set on.
    """
    title = "Scaling: `gradexplain walk FILE --format json` on generated Linear+Tanh specs"
    print(f"{title}: {len(SCALING_LAYERS)} sizes, {rounds} rounds", file=sys.stderr, flush=True)
    torch_import = Command('python -c "import torch"', [sys.executable, "-c", "import torch"])
    walks: list[Command] = []
    problems: list[str] = []
    for layers in SCALING_LAYERS:
        spec = workdir / f"mlp_{layers}.yaml"
        spec.write_text(make_mlp_spec(layers), encoding="utf-8")
        check = run_once(Command("validate", [*gx, "validate", str(spec)]))
        if check.failure is not None:
            problems.append(f"- generated spec of {layers} layers does not validate: "
                            f"{check.failure}")
        walks.append(Command(f"{layers} layers", [*gx, "walk", str(spec), "--format", "json"],
                             stdout_to=workdir / f"mlp_{layers}.json"))
    measure([torch_import, *walks], rounds)
    out = [f"## {title}", ""]
    ok = torch_import.failure is None and bool(torch_import.times)
    torch_time = torch_import.median() if ok else None
    if torch_time is None:
        problems.append(f"- FAILED: `{torch_import.label}`: {torch_import.failure or 'no runs'}")
    first = walks[0]
    base_time = first.median() if first.failure is None and first.times else None
    base_size: float | None = None
    results: dict[int, tuple[float, float]] = {}
    rows: list[list[str]] = []
    for layers, command in zip(SCALING_LAYERS, walks, strict=True):
        if command.failure is not None or not command.times:
            problems.append(f"- FAILED: walk of {layers} layers: {command.failure or 'no runs'}")
            rows.append([str(layers), "0", "failed", "-", "-", "-", "-", "-"])
            continue
        assert command.stdout_to is not None
        megabytes = command.stdout_to.stat().st_size / MB
        if command is first:
            base_size = megabytes
        median = command.median()
        results[layers] = (median, megabytes)
        time_ratio = f"{median / base_time:.2f}x" if base_time else "-"
        torch_ratio = f"{median / torch_time:.2f}x" if torch_time else "-"
        size_ratio = f"{megabytes / base_size:.2f}x" if base_size else "-"
        rows.append([str(layers), str(len(command.times)), f"{median:.3f}", iqr(command.times),
                     time_ratio, torch_ratio, f"{megabytes:.3f}", size_ratio])
    out.append(table(["layers", "runs", "median (s)", "p25-p75 (s)", "time x 10 layers",
                      "time x import torch", "JSON (MB)", "size x 10 layers"], rows))
    out.append("")
    if torch_time is not None:
        spread = f" (p25-p75 {iqr(torch_import.times)} s)" if len(torch_import.times) > 1 else ""
        out.append(f"- `{torch_import.label}` in the same rounds: median {torch_time:.3f} s"
                   f"{spread}")
    largest = SCALING_LAYERS[-1]
    if largest in results:
        seconds, megabytes = results[largest]
        time_ok = "met" if seconds < TARGET_SECONDS else "NOT met"
        size_ok = "met" if megabytes < TARGET_MB else "NOT met"
        out.append(f"- target: {largest} layers in under {TARGET_SECONDS:.0f} s in total: "
                   f"{time_ok} ({seconds:.2f} s)")
        out.append(f"- target: {largest} layers' JSON under {TARGET_MB:.0f} MB: "
                   f"{size_ok} ({megabytes:.2f} MB)")
    else:
        out.append(f"- targets for {largest} layers: not measured (the walk failed)")
    if problems:
        out += ["", *problems]
    return out, not problems


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="few repetitions, for a smoke test (the figures are rough)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds for the start-up and walk sections (default 20, quick 3)")
    parser.add_argument("--scaling-rounds", type=int, default=None,
                        help="rounds for the scaling section (default 5, quick 1)")
    parser.add_argument("--only", choices=["startup", "walk", "session", "scaling"],
                        action="append",
                        help="run only this section (repeatable)")
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 20)
    scaling_rounds = (args.scaling_rounds if args.scaling_rounds is not None
                      else (1 if args.quick else 5))
    if rounds < 1 or scaling_rounds < 1:
        parser.error("rounds must be at least 1")
    sections = args.only or ["startup", "walk", "session", "scaling"]

    os.chdir(REPO)
    gx, gx_note = launcher()
    py = sys.executable
    shown_rounds = {name: (scaling_rounds if name == "scaling" else rounds) for name in sections}
    out = header(gx_note, gx, shown_rounds)
    print("\n".join(out), flush=True)
    all_ran = True

    if "startup" in sections:
        startup: list[tuple[Command, float | None]] = [
            (Command("gradexplain --help", [*gx, "--help"]), STARTUP_BUDGET),
            (Command(f"gradexplain validate {TWO_MODULES}", [*gx, "validate", TWO_MODULES]),
             STARTUP_BUDGET),
        ]
        if gx[0] != py:
            startup.append((Command("python -m gradexplain --help",
                                    [py, "-m", "gradexplain", "--help"]), None))
        lines, ran = ratio_section(
            "Start-up",
            Command('python -c "import typer, rich, yaml"', [py, "-c", "import typer, rich, yaml"]),
            startup, rounds, "budget (issue 7)")
        print("\n" + "\n".join(lines), flush=True)
        all_ran = all_ran and ran

    if "walk" in sections:
        lines, ran = ratio_section(
            "Walk latency",
            Command('python -c "import torch"', [py, "-c", "import torch"]),
            [(Command(f"gradexplain walk {TWO_MODULES} > /dev/null",
                      [*gx, "walk", TWO_MODULES]), WALK_BUDGET),
             (Command(f"gradexplain walk {TWO_MODULES} --format json > /dev/null",
                      [*gx, "walk", TWO_MODULES, "--format", "json"]), WALK_BUDGET)],
            rounds, "budget (issue 3)")
        print("\n" + "\n".join(lines), flush=True)
        all_ran = all_ran and ran

    if "session" in sections:
        with tempfile.TemporaryDirectory(prefix="gradexplain-bench-") as tmp:
            lines, ran = session_section(gx, rounds, Path(tmp))
        print("\n" + "\n".join(lines), flush=True)
        all_ran = all_ran and ran

    if "scaling" in sections:
        with tempfile.TemporaryDirectory(prefix="gradexplain-bench-") as tmp:
            lines, ran = scaling_section(gx, scaling_rounds, Path(tmp))
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
