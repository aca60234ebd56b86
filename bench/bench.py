"""Every speed figure the README quotes, each as a ratio measured side by side in one run.

What it measures (wall time of whole processes, as a user at a shell sees them):

1. Start-up: ``gradexplain --help``, ``gradexplain validate specs/two_modules.yaml`` and a bash
   completion request against ``python -c "import typer, rich, yaml"`` (the libraries the
   command line cannot avoid).
   Budget (issue 7): within 1.5x the baseline.
2. Walk latency: ``gradexplain walk specs/two_modules.yaml`` (text, and ``--format json``)
   against ``python -c "import torch"``. Budget (issue 3): within 1.25x the baseline.
3. Scaling: ``gradexplain walk FILE --format json`` on generated specs of 10, 100 and 300
   Linear+Tanh layers, with the JSON's size, against the 10-layer walk and against
   ``python -c "import torch"`` timed in the same rounds. Targets (issue 3): 300 layers in under
   10 s in total, JSON under 50 MB. The 10 s target is absolute seconds, so it depends on the
   machine and on its load; the "x import torch" column says how it would scale elsewhere.
4. Python API (in this process, not whole commands): ``explain(model, x)`` on a 50-layer MLP
   (Linear(256, 256) + ReLU blocks, batch 32) against a plain forward + backward of it ("plain")
   and against the same two hooked passes gradexplain makes with every hook it registers doing
   nothing ("floor", registering and removing them included); the text and JSON renderings as
   ratios to the capture; hook calls, checks, and the Python heap peak (``tracemalloc``) of a
   capture against the floor's.

5. Threads: ``gradexplain walk examples/models.py:make_deep --input 32x256 --format json``
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
then rounds in rotating order of three units (plain x5, floor x5, and a capture followed by its
two renderings, after which the Explanation is dropped), with a ``gc.collect()`` before each unit
(outside any time). Setup such as copying the model is outside the times too; the capture's copy
is inside, being part of ``explain``. Its rounds stop early (after at least 2) when another, and
the memory and hook counts after them, would take the section past 55 s (a capture is slow on a
busy machine); the section says how many ran. It runs torch on one intra-op thread
(``--torch-threads``): a batch of 32 gains little from more, and on a shared machine they stall
(seen: a 12 ms plain forward + backward taking 2 s with torch's default of 2 threads, at a load
average of 4 on 2 CPUs), which buries the ratios in noise. ``explain`` is called with
``threads=None`` so that this one setting governs the capture as well as the plain and floor
passes (by default ``explain`` would use one thread whatever the setting).

Run from anywhere (it changes to the repository root): ``python bench/bench.py``, or
``python bench/bench.py --quick`` for a smoke test with few repetitions.
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

REPO = Path(__file__).resolve().parent.parent
TWO_MODULES = "specs/two_modules.yaml"
STARTUP_BUDGET = 1.5
WALK_BUDGET = 1.25
SCALING_LAYERS = (10, 100, 300)
TARGET_SECONDS = 10.0
TARGET_MB = 50.0
TIMEOUT_SECONDS = 600.0
# Commands run as on a user's machine, where Python caches compiled bytecode (pip compiles it at
# install; an editable install writes it on first run). With PYTHONDONTWRITEBYTECODE set, as on
# some CI machines, every run would compile gradexplain's sources again while the baselines'
# libraries come precompiled, which is not what a user sees.
COMMAND_ENV = {name: value for name, value in os.environ.items()
               if name != "PYTHONDONTWRITEBYTECODE"}
MB = 1_000_000
PYTHON_LAYERS = 50
PYTHON_WIDTH = 256
PYTHON_BATCH = 32
PYTHON_BUDGET_SECONDS = 55.0  # the rounds; what follows them takes about 4 captures
PYTHON_MIN_ROUNDS = 2
PYTHON_REPEAT = 5  # plain and floor runs per round: they are fast, and noisier than a capture


@dataclass
class Command:
    """One command line to time; ``stdout_to`` is a file to keep its output in, or None, and
    ``env`` the variables it runs with on top of ``COMMAND_ENV`` (a shell's completion request)."""

    label: str
    argv: list[str]
    stdout_to: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
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
            env={**COMMAND_ENV, **command.env},
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


@dataclass
class Timed:
    """One function call to time in the Python API section: ``run`` does it once and returns
    its seconds (setup such as copying the model stays outside); ``repeat`` runs per round."""

    label: str
    run: Callable[[], float]
    repeat: int = 1
    times: list[float] = field(default_factory=list)
    failure: str | None = None

    def median(self) -> float:
        return statistics.median(self.times)

    def once(self) -> None:
        """Run once (unless it failed before) and record the time, or the failure."""
        if self.failure is not None:
            return
        try:
            seconds = self.run()
        except Exception as error:  # a bench reports what failed, and goes on
            self.failure = f"{type(error).__name__}: {last_line(str(error))}"
        else:
            self.times.append(seconds)


def python_model() -> tuple[nn.Module, torch.Tensor]:
    """The README's 50-layer MLP (`make_deep` of examples/models.py: Linear(256, 256) + ReLU
    blocks), built under seed 0, and an input batch of 32 drawn right after it."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("gradexplain_examples",
                                                  REPO / "examples" / "models.py")
    assert spec is not None and spec.loader is not None
    examples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(examples)
    torch.manual_seed(0)
    model: nn.Module = examples.make_deep()
    assert len(list(model.children())) == PYTHON_LAYERS
    return model, torch.randn(PYTHON_BATCH, PYTHON_WIDTH)


def fresh(model: nn.Module, x: torch.Tensor) -> tuple[nn.Module, torch.Tensor]:
    """A deep copy of the model (no hooks, no .grad) and a copy of the input requiring grad."""
    return copy.deepcopy(model), x.detach().clone().requires_grad_(True)


def plain_pass(model: nn.Module, x: torch.Tensor) -> None:
    loss = model(x).sum()
    loss.backward()


def floor_pass(model: nn.Module, x: torch.Tensor, mode: str, hook: Callable[..., None]) -> None:
    """One forward + backward with every hook gradexplain registers in pass `mode` ("legacy"
    or "full"), each being `hook`, as gradexplain's tracer does: forward pre-hooks, forward
    hooks and the mode's backward hooks on every module; `register_hook` on the leaves (the
    input and every parameter), on every module output (from the forward hook) and on the
    loss; `register_post_accumulate_grad_hook` on every leaf; and after the forward
    `register_prehook` + `register_hook` on every autograd node reachable from the loss,
    breadth-first. Every handle is removed at the end."""
    import torch

    handles: list[Any] = []
    hooked: set[int] = set()
    kept: list[torch.Tensor] = []  # alive until the end, so that no id is reused

    def hook_tensor(value: object) -> None:
        if isinstance(value, torch.Tensor):
            if value.requires_grad and id(value) not in hooked:
                hooked.add(id(value))
                kept.append(value)
                handles.append(value.register_hook(hook))  # type: ignore[no-untyped-call]
        elif isinstance(value, (tuple, list)):
            for item in value:
                hook_tensor(item)

    def forward_hook(module: nn.Module, inputs: tuple[Any, ...], output: object) -> None:
        hook(module, inputs, output)
        hook_tensor(output)

    with warnings.catch_warnings(record=True):  # as the tracer: legacy hooks warn
        warnings.simplefilter("always")
        for module in model.modules():
            handles.append(module.register_forward_pre_hook(hook))
            handles.append(module.register_forward_hook(forward_hook))
            if mode == "legacy":
                handles.append(module.register_backward_hook(hook))
            else:
                handles.append(module.register_full_backward_pre_hook(hook))
                handles.append(module.register_full_backward_hook(hook))
        for leaf in [x, *model.parameters()]:
            hook_tensor(leaf)
            handles.append(
                leaf.register_post_accumulate_grad_hook(hook))  # type: ignore[no-untyped-call]
        loss = model(x).sum()
        hook_tensor(loss)
        queue = deque([loss.grad_fn])
        seen: set[Any] = set()
        while queue:
            node = queue.popleft()
            if node is None or node in seen:
                continue
            seen.add(node)
            handles.append(node.register_prehook(hook))
            handles.append(node.register_hook(hook))
            queue.extend(child for child, _ in node.next_functions)
        loss.backward()
    for handle in handles:
        handle.remove()


def do_nothing(*args: object) -> None:
    """The floor's hook, for every kind of hook: does nothing, returns None."""


def python_section(rounds: int, budget: float | None) -> tuple[list[str], bool]:
    """Time `explain(model, x)` and its renderings against a plain and a do-nothing-hooks
    forward + backward, interleaved in one process: markdown lines, and whether all ran.

    `budget` (seconds for the whole section) stops the rounds early, after at least
    PYTHON_MIN_ROUNDS, when one more would go past it; None runs every round.
    """
    started = time.perf_counter()
    title = (f"Python API: `explain(model, x)` on a {PYTHON_LAYERS}-layer MLP "
             f"(Linear({PYTHON_WIDTH}, {PYTHON_WIDTH}) + ReLU blocks), batch {PYTHON_BATCH}")
    print(f"{title}: up to {rounds} rounds", file=sys.stderr, flush=True)
    import inspect
    import json
    import tracemalloc

    import torch

    # `from gradexplain import explain` is the documented path; gradexplain.api is where it
    # lives (the package attribute is shadowed by the gradexplain.explain submodule once that
    # is imported, so the bench names the function itself).
    from gradexplain.api import Explanation, explain
    from gradexplain.render.console import plain_text

    model, x = python_model()
    collapse = "collapse" in inspect.signature(Explanation.text).parameters
    text_call = "text(collapse=True)" if collapse else "text()"
    state: dict[str, Any] = {}

    def time_plain() -> float:
        copied, inputs = fresh(model, x)
        start = time.perf_counter()
        plain_pass(copied, inputs)
        return time.perf_counter() - start

    def time_floor() -> float:
        (legacy_model, legacy_x), (full_model, full_x) = fresh(model, x), fresh(model, x)
        start = time.perf_counter()
        floor_pass(legacy_model, legacy_x, "legacy", do_nothing)
        floor_pass(full_model, full_x, "full", do_nothing)
        return time.perf_counter() - start

    def time_capture() -> float:
        start = time.perf_counter()
        state["explanation"] = explain(model, x, threads=None)
        return time.perf_counter() - start

    def explanation() -> Any:
        if "explanation" not in state:
            raise RuntimeError("no capture to render (the capture failed)")
        return state["explanation"]

    def time_text() -> float:
        result = explanation()
        start = time.perf_counter()
        state["text"] = plain_text(result.text(collapse=True) if collapse else result.text())
        return time.perf_counter() - start

    def time_json() -> float:
        result = explanation()
        start = time.perf_counter()
        state["json"] = json.dumps(result.json())
        return time.perf_counter() - start

    plain = Timed("plain: forward + `out.sum().backward()`, no hooks", time_plain,
                  PYTHON_REPEAT)
    floor = Timed("floor: 2 passes with every hook doing nothing", time_floor, PYTHON_REPEAT)
    capture = Timed("walk: `explain(model, x)`", time_capture)
    text = Timed(f"render: `plain_text(explanation.{text_call})`", time_text)
    json_render = Timed("render: `json.dumps(explanation.json())`", time_json)
    timed = [plain, floor, capture, text, json_render]
    # The renders follow their capture, and the Explanation is dropped after them, so that the
    # plain and floor runs never share the process with one (nor with its garbage).
    units = [[plain], [floor], [capture, text, json_render]]

    def run_unit(unit: list[Timed]) -> None:
        gc.collect()  # ~0.2 s with torch loaded: once a unit, not once a run
        for item in unit:
            for _ in range(item.repeat):
                item.once()
        state.clear()

    for unit in units:  # warm-up
        run_unit(unit)
    for item in timed:
        item.times.clear()
    done = 0
    for index in range(rounds):
        shift = index % len(units)
        for unit in units[shift:] + units[:shift]:
            run_unit(unit)
        done += 1
        elapsed = time.perf_counter() - started
        print(f"  round {done}/{rounds} done ({elapsed:.0f} s)", file=sys.stderr, flush=True)
        if budget is not None and done >= PYTHON_MIN_ROUNDS and done < rounds:
            per_round = elapsed / (done + 1)  # the warm-up was about one round
            # after the rounds: a traced capture (about 2x) and the floors
            tail = 4 * capture.median() if capture.times else per_round
            if elapsed + per_round + tail > budget:
                break

    out = [f"## {title}", ""]
    problems = [f"- FAILED: {item.label}: {item.failure}" for item in timed if item.failure]
    medians = {id(item): item.median() for item in timed if item.times and not item.failure}
    rows: list[list[str]] = []
    references = (plain, floor, capture)
    for item in timed:
        if id(item) not in medians:
            rows.append([item.label, str(len(item.times)), "failed", "-", "-", "-", "-"])
            continue
        median = medians[id(item)]
        ratios = [f"{median / medians[id(ref)]:.2f}x" if id(ref) in medians else "-"
                  for ref in references]
        rows.append([item.label, str(len(item.times)), f"{median * 1000:.1f}",
                     iqr(item.times, 1000, 1), *ratios])
    out.append(table(["measure", "runs", "median (ms)", "p25-p75 (ms)", "x plain", "x floor",
                      "x capture"], rows))
    out.append("")

    def ratio(top: Timed, bottom: Timed) -> str:
        if id(top) not in medians or id(bottom) not in medians:
            return "-"
        return f"{medians[id(top)] / medians[id(bottom)]:.2f}x"

    stopped = " (stopped early: the section's time budget)" if done < rounds else ""
    out.append(f"- rounds: {done} of {rounds}{stopped}; plain and floor run {PYTHON_REPEAT}"
               f" times a round; torch {torch.__version__}, intra-op threads: "
               f"{torch.get_num_threads()}")
    out.append(f"- walk / plain {ratio(capture, plain)}, walk / floor {ratio(capture, floor)}, "
               f"floor / plain {ratio(floor, plain)}")
    out.append(f"- renders as a share of the capture: text {ratio(text, capture)}, "
               f"JSON {ratio(json_render, capture)}")
    if capture.failure is None:
        # Memory, once each (deterministic, and tracemalloc slows Python down ~2x): the Python
        # heap only. torch allocates tensor storage outside Python's allocator, so tensors are
        # not counted; RSS is not reported: its peak (ru_maxrss) is one high-water mark for
        # the whole process, which the first of the two would set for both.
        def floor_both() -> None:
            for mode in ("legacy", "full"):
                floor_pass(*fresh(model, x), mode, do_nothing)

        def traced_capture() -> None:
            state["explanation"] = explain(model, x, threads=None)

        peaks: list[float] = []
        held = 0.0
        for action in (floor_both, traced_capture):
            gc.collect()
            tracemalloc.start()
            try:
                action()
                held, peak = tracemalloc.get_traced_memory()
                peaks.append(peak / MB)
            finally:
                tracemalloc.stop()
        walk = state["explanation"].walk
        events = [len(walk_pass.events) for walk_pass in walk.passes]
        calls = [0]

        def count(*args: object) -> None:
            calls[0] += 1

        for mode in ("legacy", "full"):
            floor_pass(*fresh(model, x), mode, count)
        same = ("the same hooks" if calls[0] == sum(events)
                else "NOT the same count: the floor misses or adds hooks")
        out.append(f"- hook calls recorded: {sum(events)} events "
                   f"({' + '.join(str(n) for n in events)} in the passes); checks made: "
                   f"{len(walk.checks())}; the floor's hooks ran {calls[0]} times ({same})")
        if text.failure is None and json_render.failure is None:
            time_text()
            time_json()
            lines = len(state["text"].splitlines())
            out.append(f"- output: text {lines} lines ({len(state['text']) / MB:.2f} MB), "
                       f"JSON {len(state['json'].encode()) / MB:.2f} MB")
        out.append(f"- Python heap peak (tracemalloc; tensor storage not counted): capture "
                   f"{peaks[1]:.1f} MB ({held / MB:.1f} MB still held by the Explanation), "
                   f"floor (both passes) {peaks[0]:.2f} MB: {peaks[1] / peaks[0]:.1f}x")
        state.clear()
    out.append(f"- section time: {time.perf_counter() - started:.0f} s")
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
    parser.add_argument("--python-rounds", type=int, default=None,
                        help="rounds for the Python API section (default up to 10 within "
                             f"{PYTHON_BUDGET_SECONDS:.0f} s, quick 2; given: all of them)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch.set_num_threads for the Python API section (default 1; "
                             "0: torch's own default)")
    parser.add_argument("--only", choices=["startup", "walk", "session", "scaling", "python",
                                           "threads"],
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
    sections = args.only or ["startup", "walk", "session", "scaling", "python", "threads"]

    os.chdir(REPO)
    gx, gx_note = launcher()
    py = sys.executable
    section_rounds = {"scaling": scaling_rounds, "python": python_rounds,
                      "threads": scaling_rounds}
    shown_rounds = {name: section_rounds.get(name, rounds) for name in sections}
    out = header(gx_note, gx, shown_rounds)
    print("\n".join(out), flush=True)
    all_ran = True

    if "startup" in sections:
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

    if "python" in sections:
        if args.torch_threads > 0:
            import torch

            torch.set_num_threads(args.torch_threads)
        budget = PYTHON_BUDGET_SECONDS if args.python_rounds is None else None
        lines, ran = python_section(python_rounds, budget)
        print("\n" + "\n".join(lines), flush=True)
        all_ran = all_ran and ran
    if "threads" in sections:
        with tempfile.TemporaryDirectory(prefix="gradexplain-bench-") as tmp:
            lines, ran = threads_section(gx, scaling_rounds, Path(tmp))
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
