"""The sections that time ``gradexplain`` commands as whole processes: start-up, walk latency,
sessions (render a saved one vs run the spec again), scaling on generated specs, and threads.

Each section takes the argv prefix that runs gradexplain and its number of rounds, and returns
its markdown lines and whether every command ran; ``bench.py`` prints them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from timing import (
    MB,
    TIMEOUT_SECONDS,
    Command,
    iqr,
    last_line,
    measure,
    ratio_section,
    run_once,
    table,
)

TWO_MODULES = "specs/two_modules.yaml"
STARTUP_BUDGET = 1.5
WALK_BUDGET = 1.25  # issue 3, for JSON
WALK_TEXT_BUDGET = 1.15  # issue 20, for text (the default)
DDP_SPEC = "specs/ddp_hooks.yaml"
DISTRIBUTED_BUDGET = 2.0  # issue 21: a 2-rank walk within 2x the single-process walk
SCALING_LAYERS = (10, 100, 300)
TARGET_SECONDS = 10.0
TARGET_MB = 50.0
# Issue 20: text at most this many times JSON's cost at 300 layers; a 1,000-layer model (1,000
# modules: 500 Linear + Tanh pairs) walks with JSON under LARGE_MB and a peak resident set under
# LARGE_RSS. The largest spec the step bound (2,000 steps) allows, 999 pairs, is measured once
# beside it: its JSON holds every value of twice as many hook arguments.
TEXT_OVER_JSON = 1.2
LARGE_PAIRS = 500
LARGEST_PAIRS = 999
LARGE_MB = 50.0
LARGE_RSS = 1_000_000_000


def startup_section(gx: list[str], rounds: int) -> tuple[list[str], bool]:
    """`--help`, `validate` and a shell completion request against importing the libraries the
    command line cannot avoid (typer, rich, yaml); budget: issue 7."""
    py = sys.executable
    startup: list[tuple[Command, float | None]] = [
        (Command("gradexplain --help", [*gx, "--help"]), STARTUP_BUDGET),
        (Command(f"gradexplain validate {TWO_MODULES}", [*gx, "validate", TWO_MODULES]),
         STARTUP_BUDGET),
        # What bash runs on <TAB> after `gradexplain walk --fo`.
        (Command("shell completion (bash): gradexplain walk --fo<TAB>", gx,
                 env={"_GRADEXPLAIN_COMPLETE": "complete_bash",
                      "COMP_WORDS": "gradexplain walk --fo", "COMP_CWORD": "2"}),
         STARTUP_BUDGET),
    ]
    if gx[0] != py:
        startup.append((Command("python -m gradexplain --help",
                                [py, "-m", "gradexplain", "--help"]), None))
    return ratio_section(
        "Start-up",
        Command('python -c "import typer, rich, yaml"', [py, "-c", "import typer, rich, yaml"]),
        startup, rounds, "budget (issue 7)")


def walk_section(gx: list[str], rounds: int) -> tuple[list[str], bool]:
    """`walk` of the smallest spec, as text and as JSON, against `import torch`; budgets:
    issue 20 (text), issue 3 (JSON)."""
    py = sys.executable
    return ratio_section(
        "Walk latency",
        Command('python -c "import torch"', [py, "-c", "import torch"]),
        [(Command(f"gradexplain walk {TWO_MODULES} > /dev/null",
                  [*gx, "walk", TWO_MODULES]), WALK_TEXT_BUDGET),
         (Command(f"gradexplain walk {TWO_MODULES} --format json > /dev/null",
                  [*gx, "walk", TWO_MODULES, "--format", "json"]), WALK_BUDGET)],
        rounds, "budget (issues 20, 3)")


def distributed_section(gx: list[str], rounds: int) -> tuple[list[str], bool]:
    """`walk --ranks 2` of the facts file's model, under DDP and FSDP2, against the
    single-process walk of the same spec; goal (issue 21): within 2x."""
    single = [*gx, "walk", DDP_SPEC]
    return ratio_section(
        "Distributed walks: 2 ranks against one process",
        Command(f"gradexplain walk {DDP_SPEC} > /dev/null", single),
        [(Command(f"gradexplain walk {DDP_SPEC} --ranks 2 > /dev/null",
                  [*single, "--ranks", "2"]), DISTRIBUTED_BUDGET),
         (Command(f"gradexplain walk {DDP_SPEC} --ranks 2 --wrap fsdp > /dev/null",
                  [*single, "--ranks", "2", "--wrap", "fsdp"]), DISTRIBUTED_BUDGET)],
        rounds, "goal (issue 21)")


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


def threads_section(gx: list[str], rounds: int, workdir: Path) -> tuple[list[str], bool]:
    """A 50-layer Python model walked with one torch thread (the default) and with one per
    CPU, side by side, and whether the two printed the same JSON."""
    cpus = os.cpu_count() or 1
    target = ["walk", "examples/models.py:make_deep", "--input", "32x256", "--format", "json"]
    one = Command("walk make_deep --threads 1 (default)", [*gx, *target, "--threads", "1"],
                  stdout_to=workdir / "one.json")
    many = Command(f"walk make_deep --threads {cpus} (torch's default)",
                   [*gx, *target, "--threads", str(cpus)], stdout_to=workdir / "many.json")
    lines, ran = ratio_section(f"Threads: one torch thread vs {cpus}", one, [(many, None)],
                               rounds, "budget")
    if ran:
        same = (workdir / "one.json").read_bytes() == (workdir / "many.json").read_bytes()
        lines += ["", f"Same JSON bytes with 1 and {cpus} threads: {'yes' if same else 'no'}."]
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
    walks, problems = scaling_walks(gx, workdir)
    measure([torch_import, *walks], rounds)
    out = [f"## {title}", ""]
    ok = torch_import.failure is None and bool(torch_import.times)
    torch_time = torch_import.median() if ok else None
    if torch_time is None:
        problems.append(f"- FAILED: `{torch_import.label}`: {torch_import.failure or 'no runs'}")
    rows, results = scaling_rows(walks, torch_time, problems)
    out.append(table(["layers", "runs", "median (s)", "p25-p75 (s)", "time x 10 layers",
                      "time x import torch", "JSON (MB)", "size x 10 layers"], rows))
    out.append("")
    if torch_time is not None:
        spread = f" (p25-p75 {iqr(torch_import.times)} s)" if len(torch_import.times) > 1 else ""
        out.append(f"- `{torch_import.label}` in the same rounds: median {torch_time:.3f} s"
                   f"{spread}")
    out += scaling_targets(results)
    if problems:
        out += ["", *problems]
    return out, not problems


def large_section(gx: list[str], rounds: int, workdir: Path) -> tuple[list[str], bool]:
    """Output at scale, side by side: the 300-layer spec walked as JSON, as text (the default)
    and as text with every timeline and block, and a 1,000-layer spec as JSON; time, peak
    resident set and output size, with issue 20's goals met or not."""
    title = "Large models: text against JSON at 300 layers, and 1,000 layers"
    print(f"{title}: {rounds} rounds", file=sys.stderr, flush=True)
    medium = workdir / "mlp_300.yaml"
    medium.write_text(make_mlp_spec(SCALING_LAYERS[-1]), encoding="utf-8")
    large = workdir / f"mlp_{LARGE_PAIRS}.yaml"
    large.write_text(make_mlp_spec(LARGE_PAIRS), encoding="utf-8")
    json_300 = Command("300 layers, `--format json`", [*gx, "walk", str(medium), "--format",
                                                       "json"], stdout_to=workdir / "300.json")
    texts = [Command("300 layers, text", [*gx, "walk", str(medium)],
                     stdout_to=workdir / "300.txt"),
             Command("300 layers, text `--timeline --all-blocks`",
                     [*gx, "walk", str(medium), "--timeline", "--all-blocks"],
                     stdout_to=workdir / "300-timeline.txt")]
    json_large = Command(f"{2 * LARGE_PAIRS} layers ({LARGE_PAIRS} Linear + Tanh pairs), "
                         "`--format json`", [*gx, "walk", str(large), "--format", "json"],
                         stdout_to=workdir / "large.json")
    commands = [json_300, *texts, json_large]
    measure(commands, rounds)
    problems = [f"- FAILED: {item.label}: {item.failure or 'no runs'}"
                for item in commands if item.failure is not None or not item.times]
    rows = []
    for item in commands:
        if item.failure is not None or not item.times:
            rows.append([item.label, "0", "failed", "-", "-", "-", "-"])
            continue
        assert item.stdout_to is not None
        against = (f"{item.median() / json_300.median():.2f}x"
                   if json_300.times and json_300.failure is None else "-")
        rows.append([item.label, str(len(item.times)), f"{item.median():.2f}", iqr(item.times),
                     against, f"{max(item.peaks) / MB:.0f}",
                     f"{item.stdout_to.stat().st_size / MB:.2f}"])
    out = [f"## {title}", "", table(["command", "runs", "median (s)", "p25-p75 (s)",
                                     "x 300 layers JSON", "peak RSS (MB)", "output (MB)"], rows),
           ""]
    if not problems:
        for text in texts:
            share = text.median() / json_300.median()
            met = "met" if share <= TEXT_OVER_JSON else "NOT met"
            out.append(f"- goal: {text.label} at most {TEXT_OVER_JSON:g}x JSON's time: {met} "
                       f"({share:.2f}x)")
        assert json_large.stdout_to is not None
        size, peak = json_large.stdout_to.stat().st_size, max(json_large.peaks)
        out.append(f"- goal: {2 * LARGE_PAIRS} layers' JSON under {LARGE_MB:.0f} MB: "
                   f"{'met' if size < LARGE_MB * MB else 'NOT met'} ({size / MB:.1f} MB)")
        out.append(f"- goal: {2 * LARGE_PAIRS} layers' peak RSS under {LARGE_RSS / 1e9:g} GB: "
                   f"{'met' if 0 < peak < LARGE_RSS else 'NOT met'} ({peak / MB:.0f} MB"
                   f"{'; not measured on this platform' if peak == 0 else ''})")
    out.append(largest_once(gx, workdir))
    return out + (["", *problems] if problems else []), not problems


def largest_once(gx: list[str], workdir: Path) -> str:
    """The largest spec the step bound allows, walked once as JSON: a line with its time, peak
    resident set and JSON size (no goal: issue 20's are for 1,000 layers)."""
    spec = workdir / f"mlp_{LARGEST_PAIRS}.yaml"
    spec.write_text(make_mlp_spec(LARGEST_PAIRS), encoding="utf-8")
    output = workdir / "largest.json"
    outcome = run_once(Command("largest", [*gx, "walk", str(spec), "--format", "json"],
                               stdout_to=output))
    label = f"- once: {2 * LARGEST_PAIRS} layers ({LARGEST_PAIRS} pairs, the step bound's most)"
    if outcome.failure is not None:
        return f"{label}: FAILED: {outcome.failure}"
    return (f"{label}: {outcome.seconds:.1f} s, peak RSS {outcome.peak / MB:.0f} MB, JSON "
            f"{output.stat().st_size / MB:.1f} MB")


def scaling_walks(gx: list[str], workdir: Path) -> tuple[list[Command], list[str]]:
    """Write a spec of each size in ``workdir`` and check that it validates: the walk commands
    to time (one per size, in ``SCALING_LAYERS`` order), and a problem line for each spec that
    does not validate."""
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
    return walks, problems


def scaling_rows(
    walks: list[Command], torch_time: float | None, problems: list[str]
) -> tuple[list[list[str]], dict[int, tuple[float, float]]]:
    """The table's row of each size, against the first (smallest) walk and `import torch`, and
    the median seconds and JSON MB of each size that ran; a failed walk adds to ``problems``."""
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
    return rows, results


def scaling_targets(results: dict[int, tuple[float, float]]) -> list[str]:
    """Whether the largest spec's walk met issue 3's targets (time and JSON size)."""
    largest = SCALING_LAYERS[-1]
    if largest not in results:
        return [f"- targets for {largest} layers: not measured (the walk failed)"]
    seconds, megabytes = results[largest]
    time_ok = "met" if seconds < TARGET_SECONDS else "NOT met"
    size_ok = "met" if megabytes < TARGET_MB else "NOT met"
    return [f"- target: {largest} layers in under {TARGET_SECONDS:.0f} s in total: "
            f"{time_ok} ({seconds:.2f} s)",
            f"- target: {largest} layers' JSON under {TARGET_MB:.0f} MB: "
            f"{size_ok} ({megabytes:.2f} MB)"]
