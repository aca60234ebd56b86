"""The Python API section: ``explain(model, x)`` on each model of ``peer_models.MODELS`` (the
README's 50-layer MLP and a ResNet-18), timed as function calls in this process against a plain
forward + backward ("plain"), against the same two hooked passes gradexplain makes with every
hook doing nothing ("floor") and with every hook cloning the tensors it is handed ("clone floor",
the least a tool that keeps what hooks see can do), and against torchlens recording the same
model with its gradients, when torchlens is installed (`pip install -e '.[bench]'`); then the
text and JSON renderings; and, once each after the rounds, hook calls, checks, output sizes and
the Python heap peak of a capture against the floor's.

The goals (issue 20) are printed as met or not: a capture within torchlens's time and within 3x
the clone floor, for each model.

It owns the passes the capture is compared with (``plain_pass``, ``floor_pass``,
``torchlens_pass``), the clocks a call is timed by (``CLOCKS``), what one timed call is
(``Timed``), the calls themselves (``Calls``), the rounds and their early stop, and the section's
lines. torch and gradexplain are imported only when the section runs, so that a bench of the
command sections never loads them.
"""

from __future__ import annotations

import copy
import gc
import importlib.util
import inspect
import json
import statistics
import sys
import time
import tracemalloc
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from peer_models import MODELS, BenchModel
from timing import MB, iqr, last_line, table

if TYPE_CHECKING:
    import torch
    from torch import nn

# How each call is timed: wall time, or the process's CPU time (user and system: page faults
# count, waiting for a CPU the machine's other work holds does not).
Clock = Callable[[], float]
CLOCKS: dict[str, Clock] = {"wall": time.perf_counter, "cpu": time.process_time}
PYTHON_BUDGET_SECONDS = 70.0  # each model's rounds; what follows them takes about 4 captures
PYTHON_MIN_ROUNDS = 2
PYTHON_REPEAT = 5  # plain and floor runs per round: they are fast, and noisier than a capture
TORCHLENS_GOAL = 1.0  # a capture at most torchlens's time
CLONE_FLOOR_GOAL = 3.0  # and at most this many times the clone floor


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
    `register_prehook` + `register_hook` on every autograd node reachable from the loss
    (``node_hooks``). Every handle is removed at the end."""
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
        handles += node_hooks(loss, hook)
        loss.backward()
    for handle in handles:
        handle.remove()


def node_hooks(loss: torch.Tensor, hook: Callable[..., None]) -> list[Any]:
    """`register_prehook` + `register_hook` on every autograd node reachable from the loss,
    breadth-first: their handles."""
    handles: list[Any] = []
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
    return handles


def do_nothing(*args: object) -> None:
    """The floor's hook, for every kind of hook: does nothing, returns None."""


def clone_all(*args: object) -> None:
    """The clone floor's hook: a copy of every tensor it is handed (in tuples too), kept only
    until it returns, as the least a tool that records what hooks see must do."""
    import torch

    def cloned(value: object) -> object:
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, (tuple, list)):
            return [cloned(item) for item in value]
        return None

    cloned(args)


def torchlens_pass(model: nn.Module, x: torch.Tensor) -> Callable[[], None] | None:
    """torchlens recording the model's forward with every activation and every gradient
    (`trace(..., save_grads=True)`, then `log_backward` of the output's sum): a function doing
    that, or None when torchlens is not installed. torchlens replaces torch's functions with
    its wrappers on its first call and leaves them there (seen: `explain` 1.5x slower in the
    same process afterwards); `Calls.time_torchlens` puts them in place before the timed call
    and takes them away after it, outside its time, so that they slow nothing else."""
    if importlib.util.find_spec("torchlens") is None:
        return None
    import torchlens

    options = torchlens.options.CaptureOptions(save_grads=True)

    def record() -> None:
        log = torchlens.trace(model, x, capture=options)
        log.log_backward(log[log.output_layers[0]].out.sum())

    return record


class Calls:
    """The calls the section times, on one model and input, each returning its seconds by
    ``clock`` (one of CLOCKS). A capture leaves its Explanation in ``state`` for the renderings
    that follow it, which leave their output there too; whoever runs them clears ``state``."""

    def __init__(self, bench_model: BenchModel, clock: Clock) -> None:
        # `from gradexplain import explain` is the documented path; gradexplain.api is where it
        # lives (the package attribute is shadowed by the gradexplain.explain submodule once
        # that is imported, so the bench names the function itself).
        from gradexplain.api import Explanation, explain
        from gradexplain.render.console import plain_text

        self.explain = explain
        self.clock = clock
        self.plain_text = plain_text
        self.model, self.x = bench_model.build()
        self.collapse = "collapse" in inspect.signature(Explanation.text).parameters
        self.has_torchlens = torchlens_pass(self.model, self.x) is not None
        self.state: dict[str, Any] = {}

    def time_plain(self) -> float:
        copied, inputs = fresh(self.model, self.x)
        start = self.clock()
        plain_pass(copied, inputs)
        return self.clock() - start

    def floor_timer(self, hook: Callable[..., None]) -> Callable[[], float]:
        """Both passes' forward + backward with every hook being `hook`, timed."""
        def time_floor() -> float:
            (legacy_model, legacy_x), (full_model, full_x) = (fresh(self.model, self.x),
                                                              fresh(self.model, self.x))
            start = self.clock()
            floor_pass(legacy_model, legacy_x, "legacy", hook)
            floor_pass(full_model, full_x, "full", hook)
            return self.clock() - start
        return time_floor

    def time_torchlens(self) -> float:
        from torchlens.backends.torch.wrappers import unwrap_torch, wrap_torch

        record = torchlens_pass(*fresh(self.model, self.x))
        assert record is not None, "timed only when torchlens is installed"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchlens's notices, not the bench's business
            wrap_torch()  # as a torchlens user's process has them after its first trace
            try:
                start = self.clock()
                record()
                return self.clock() - start
            finally:
                unwrap_torch()

    def time_capture(self) -> float:
        start = self.clock()
        self.state["explanation"] = self.explain(self.model, self.x, threads=None)
        return self.clock() - start

    def explanation(self) -> Any:
        if "explanation" not in self.state:
            raise RuntimeError("no capture to render (the capture failed)")
        return self.state["explanation"]

    def time_text(self) -> float:
        result = self.explanation()
        start = self.clock()
        self.state["text"] = self.plain_text(
            result.text(collapse=True) if self.collapse else result.text())
        return self.clock() - start

    def time_json(self) -> float:
        result = self.explanation()
        start = self.clock()
        self.state["json"] = json.dumps(result.json())
        return self.clock() - start


@dataclass
class Measures:
    """The section's timings, in the table's order. torchlens is None when it is not
    installed."""

    plain: Timed
    floor: Timed
    clone_floor: Timed
    torchlens: Timed | None
    capture: Timed
    text: Timed
    json_render: Timed

    @classmethod
    def of(cls, calls: Calls) -> Measures:
        text_call = "text(collapse=True)" if calls.collapse else "text()"
        return cls(
            plain=Timed("plain: forward + `out.sum().backward()`, no hooks", calls.time_plain,
                        PYTHON_REPEAT),
            floor=Timed("floor: 2 passes with every hook doing nothing",
                        calls.floor_timer(do_nothing), PYTHON_REPEAT),
            clone_floor=Timed("clone floor: 2 passes, every hook cloning what it is handed",
                              calls.floor_timer(clone_all), PYTHON_REPEAT),
            torchlens=(Timed("torchlens: `trace(save_grads=True)` + `log_backward`",
                             calls.time_torchlens) if calls.has_torchlens else None),
            capture=Timed("walk: `explain(model, x)`", calls.time_capture),
            text=Timed(f"render: `plain_text(explanation.{text_call})`", calls.time_text),
            json_render=Timed("render: `json.dumps(explanation.json())`", calls.time_json),
        )

    def all(self) -> list[Timed]:
        return [item for item in (self.plain, self.floor, self.clone_floor, self.torchlens,
                                  self.capture, self.text, self.json_render)
                if item is not None]

    def references(self) -> list[Timed | None]:
        """The ratio columns' references: plain, the clone floor, torchlens, the capture."""
        return [self.plain, self.clone_floor, self.torchlens, self.capture]

    def units(self) -> list[list[Timed]]:
        """What runs together in a round. The renders follow their capture, and the Explanation
        is dropped after them, so that the other runs never share the process with one (nor
        with its garbage)."""
        units = [[self.plain], [self.floor], [self.clone_floor],
                 [self.capture, self.text, self.json_render]]
        return units + ([[self.torchlens]] if self.torchlens is not None else [])


def python_section(rounds: int, budget: float | None, clock: str) -> tuple[list[str], bool]:
    """Each model of MODELS in turn (see ``model_lines``), timed by ``clock`` (a key of
    CLOCKS): markdown lines, and whether all ran."""
    out: list[str] = []
    passed = True
    for bench_model in MODELS:
        lines, ok = model_lines(bench_model, rounds, budget, clock)
        out += lines + [""]
        passed = passed and ok
    return out[:-1], passed


def model_lines(bench_model: BenchModel, rounds: int, budget: float | None,
                clock: str) -> tuple[list[str], bool]:
    """Time `explain(model, x)` and its renderings against a plain, a do-nothing-hooks and a
    cloning-hooks forward + backward and torchlens, interleaved in one process: markdown lines,
    and whether all ran.

    `budget` (seconds for the model) stops the rounds early, after at least PYTHON_MIN_ROUNDS,
    when one more would go past it; None runs every round.
    """
    started = time.perf_counter()
    title = f"Python API: `explain(model, x)` on a {bench_model.about}"
    print(f"{title}: up to {rounds} rounds", file=sys.stderr, flush=True)
    calls = Calls(bench_model, CLOCKS[clock])
    measures = Measures.of(calls)
    done = run_rounds(calls, measures, rounds, budget, started)
    timed = measures.all()
    problems = [f"- FAILED: {item.label}: {item.failure}" for item in timed if item.failure]
    medians = {id(item): item.median() for item in timed if item.times and not item.failure}
    out = [f"## {title}", "", timing_table(measures, medians), ""]
    out += summary(measures, medians, done, rounds, clock)
    if measures.capture.failure is None:
        out += after_rounds(calls, measures)
    out.append(f"- section time: {time.perf_counter() - started:.0f} s")
    if problems:
        out += ["", *problems]
    return out, not problems


def run_unit(calls: Calls, unit: list[Timed]) -> None:
    """Run each call of a unit its ``repeat`` times, after a ``gc.collect()`` (outside the
    times), then drop what the calls left in ``calls.state``."""
    gc.collect()  # ~0.2 s with torch loaded: once a unit, not once a run
    for item in unit:
        for _ in range(item.repeat):
            item.once()
    calls.state.clear()


def run_rounds(
    calls: Calls, measures: Measures, rounds: int, budget: float | None, started: float
) -> int:
    """A warm-up of every unit (its times dropped), then up to ``rounds`` rounds of the units in
    rotating order, stopping early (see ``python_section``) when ``budget`` is not None: how many
    rounds ran. ``started`` is when the section started, for its time budget."""
    units = measures.units()
    for unit in units:  # warm-up
        run_unit(calls, unit)
    for item in measures.all():
        item.times.clear()
    done = 0
    for index in range(rounds):
        shift = index % len(units)
        for unit in units[shift:] + units[:shift]:
            run_unit(calls, unit)
        done += 1
        elapsed = time.perf_counter() - started
        print(f"  round {done}/{rounds} done ({elapsed:.0f} s)", file=sys.stderr, flush=True)
        if budget is not None and done >= PYTHON_MIN_ROUNDS and done < rounds:
            per_round = elapsed / (done + 1)  # the warm-up was about one round
            # after the rounds: a traced capture (about 2x) and the floors
            capture = measures.capture
            tail = 4 * capture.median() if capture.times else per_round
            if elapsed + per_round + tail > budget:
                break
    return done


def timing_table(measures: Measures, medians: dict[int, float]) -> str:
    """The markdown table: each measure's runs, median and spread in ms, and its ratio to each
    reference (``Measures.references``). ``medians`` holds the measures that ran, by ``id``."""
    rows: list[list[str]] = []
    for item in measures.all():
        if id(item) not in medians:
            rows.append([item.label, str(len(item.times)), "failed", "-", "-", "-", "-", "-"])
            continue
        median = medians[id(item)]
        ratios = [ratio(medians, item, ref) for ref in measures.references()]
        rows.append([item.label, str(len(item.times)), f"{median * 1000:.1f}",
                     iqr(item.times, 1000, 1), *ratios])
    return table(["measure", "runs", "median (ms)", "p25-p75 (ms)", "x plain", "x clone floor",
                  "x torchlens", "x capture"], rows)


def ratio(medians: dict[int, float], top: Timed, bottom: Timed | None) -> str:
    """``top``'s median over ``bottom``'s, or "-" when either did not run."""
    if bottom is None or id(top) not in medians or id(bottom) not in medians:
        return "-"
    return f"{medians[id(top)] / medians[id(bottom)]:.2f}x"


def goal(medians: dict[int, float], top: Timed, bottom: Timed | None, most: float) -> str:
    """``top`` over ``bottom`` against a goal of at most ``most``: the ratio and met or not,
    then the same ratio round by round (``paired``), which says how far the verdict stands from
    the machine's noise."""
    if bottom is None or id(top) not in medians or id(bottom) not in medians:
        return "- (not measured)"
    met = "met" if medians[id(top)] <= most * medians[id(bottom)] else "NOT met"
    rounds = paired(top, bottom)
    spread = ""
    if len(rounds) >= 2:
        within = sum(1 for item in rounds if item <= most)
        spread = (f"; round by round {iqr(rounds, 1, 2)}x (p25-p75), "
                  f"within the goal in {within} of {len(rounds)} rounds")
    return f"{ratio(medians, top, bottom)} (goal at most {most:g}x: {met}{spread})"


def paired(top: Timed, bottom: Timed) -> list[float]:
    """``top`` over ``bottom`` in each round, each the median of its runs that round: both ran
    within the same round, so a slow stretch of a shared machine weighs on both sides of a
    ratio, where it moves one median of the whole table's (empty if either failed)."""
    per_top, per_bottom = _by_round(top), _by_round(bottom)
    if not per_top or len(per_top) != len(per_bottom):
        return []
    return [one / other for one, other in zip(per_top, per_bottom, strict=True)]


def _by_round(item: Timed) -> list[float]:
    """The median of each round's runs (``repeat`` a round); empty if a run is missing."""
    if item.failure is not None or not item.times or len(item.times) % item.repeat:
        return []
    return [statistics.median(item.times[start:start + item.repeat])
            for start in range(0, len(item.times), item.repeat)]


def summary(
    measures: Measures, medians: dict[int, float], done: int, rounds: int, clock: str
) -> list[str]:
    """The lines under the table: the rounds, the clock and torch's settings, then the ratios
    the README quotes."""
    import torch

    plain, floor, capture = measures.plain, measures.floor, measures.capture
    stopped = " (stopped early: the section's time budget)" if done < rounds else ""
    torchlens = ("not installed (`pip install -e '.[bench]'`)" if measures.torchlens is None
                 else goal(medians, capture, measures.torchlens, TORCHLENS_GOAL))
    return [
        f"- rounds: {done} of {rounds}{stopped}; plain and floors run {PYTHON_REPEAT}"
        f" times a round; timed by {'CPU' if clock == 'cpu' else 'wall'} time; torch "
        f"{torch.__version__}, intra-op threads: {torch.get_num_threads()}",
        f"- walk / torchlens: {torchlens}",
        f"- walk / clone floor: "
        f"{goal(medians, capture, measures.clone_floor, CLONE_FLOOR_GOAL)}",
        f"- walk / plain {ratio(medians, capture, plain)}, walk / floor "
        f"{ratio(medians, capture, floor)}, floor / plain {ratio(medians, floor, plain)}, "
        f"clone floor / floor {ratio(medians, measures.clone_floor, floor)}",
        f"- renders as a share of the capture: text {ratio(medians, measures.text, capture)}, "
        f"JSON {ratio(medians, measures.json_render, capture)}",
    ]


def after_rounds(calls: Calls, measures: Measures) -> list[str]:
    """Once each, after the rounds (the capture ran): the heap peaks, which leave a capture in
    ``calls.state``; from it the hook calls and checks, and the output sizes (if both renders
    ran)."""
    peaks, held = heap_peaks(calls)
    out = [hook_counts(calls)]
    if measures.text.failure is None and measures.json_render.failure is None:
        out.append(output_sizes(calls))
    out.append(f"- Python heap peak (tracemalloc; tensor storage not counted): capture "
               f"{peaks[1]:.1f} MB ({held / MB:.1f} MB still held by the Explanation), "
               f"floor (both passes) {peaks[0]:.2f} MB: {peaks[1] / peaks[0]:.1f}x")
    calls.state.clear()
    return out


def heap_peaks(calls: Calls) -> tuple[list[float], float]:
    """The Python heap peak in MB of the floor (both passes) and of a capture, and the bytes
    the capture's Explanation still holds; the Explanation stays in ``calls.state``.

    Once each (deterministic, and tracemalloc slows Python down ~2x): the Python heap only.
    torch allocates tensor storage outside Python's allocator, so tensors are not counted; RSS
    is not reported: its peak (ru_maxrss) is one high-water mark for the whole process, which
    the first of the two would set for both.
    """
    def floor_both() -> None:
        for mode in ("legacy", "full"):
            floor_pass(*fresh(calls.model, calls.x), mode, do_nothing)

    def traced_capture() -> None:
        calls.state["explanation"] = calls.explain(calls.model, calls.x, threads=None)

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
    return peaks, held


def hook_counts(calls: Calls) -> str:
    """The hook calls the capture in ``calls.state`` recorded and the checks it made, against
    how many times the floor's hooks run (the same hooks, if the floor is true to the tracer)."""
    walk = calls.state["explanation"].walk
    events = [len(walk_pass.events) for walk_pass in walk.passes]
    counted = [0]

    def count(*args: object) -> None:
        counted[0] += 1

    for mode in ("legacy", "full"):
        floor_pass(*fresh(calls.model, calls.x), mode, count)
    same = ("the same hooks" if counted[0] == sum(events)
            else "NOT the same count: the floor misses or adds hooks")
    return (f"- hook calls recorded: {sum(events)} events "
            f"({' + '.join(str(n) for n in events)} in the passes); checks made: "
            f"{len(walk.checks())}; the floor's hooks ran {counted[0]} times ({same})")


def output_sizes(calls: Calls) -> str:
    """The text and JSON renderings of the capture in ``calls.state``: lines and MB."""
    calls.time_text()
    calls.time_json()
    text = calls.state["text"]
    lines = len(text.splitlines())
    return (f"- output: text {lines} lines ({len(text) / MB:.2f} MB), "
            f"JSON {len(calls.state['json'].encode()) / MB:.2f} MB")
