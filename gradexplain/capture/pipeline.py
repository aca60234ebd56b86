"""The walk: trace both passes, label every argument, check every label, derive the chain rule.

`walk(spec)` is the whole of `gradexplain walk` before rendering. It reads the traces and the
labels (plain data) and uses torch only through the hook-free `Replay`, for the numbers the
labels are checked against and the numbers of the derivation.
"""

from __future__ import annotations

import gc
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from gradexplain.capture.build import Builder, build
from gradexplain.capture.checks import agreement
from gradexplain.capture.label import VIEWS, EventLabels, label_pass, short_name, whole_names
from gradexplain.capture.lessons.torch_errors import Attempt, explain
from gradexplain.capture.replay import Replay, RunValues
from gradexplain.capture.rules import local_derivatives
from gradexplain.capture.trace import tensor_value, trace, value_limit
from gradexplain.language.expr import BinOp, Name, Number
from gradexplain.language.model import ModelSpec
from gradexplain.records.graph import ACCUMULATE, GraphView
from gradexplain.records.lessons.captures import CaptureLesson
from gradexplain.records.lessons.interventions import InterventionLesson
from gradexplain.records.lessons.vjp import VjpLesson
from gradexplain.records.session import Session, forward_steps
from gradexplain.records.trace import Event, PassTrace, TensorValue, canonical_name
from gradexplain.records.walk import (
    Check,
    Derivation,
    DerivationLine,
    FinalGrad,
    LabelledArg,
    LabelledEvent,
    LeafGrad,
    Lessons,
    ModuleWarning,
    PassWalk,
    RunStep,
    Term,
    Walk,
)
from gradexplain.threads import DEFAULT_THREADS, torch_threads

# float32 arithmetic in another order (a hook-free run) may differ in the last bits: a check
# allows that much relative to the tensor's largest value. No absolute allowance: in a deep
# model gradients can be 1e-17 throughout, and a fixed one would let any two tiny tensors
# match, so a wrong label there would pass. The floor only lets exact zeros equal each other.
RELATIVE_TOLERANCE = 1e-4
ABSOLUTE_FLOOR = 1e-30


# The stages `capture` reports to its `progress` callback, in order (for a progress bar).
STAGES = ("legacy pass", "full pass", "labels", "check run", "checks: legacy",
          "checks: full", "chain rule", "lessons")
Progress = Callable[[str], None]


def capture(spec: ModelSpec, spec_path: str, spec_text: str, make: Builder | None = None,
            max_values: int | None = None, progress: Progress | None = None,
            threads: int | None = DEFAULT_THREADS) -> Session:
    """Everything a renderer needs about the spec's run, to render now or save for later.
    `make` builds a Python model (see `pymodel`); a YAML spec is built from the spec.
    Tensors above `max_values` elements are recorded as summaries (default 10,000).
    `progress` is told each stage of STAGES as it starts. torch runs with `threads` intra-op
    threads (None: as the caller has it), and the caller's setting is restored afterwards."""
    with torch_threads(threads), value_limit(max_values), _collector_paused():
        result, traces = _walk(spec, spec_path, make, progress or _silent)
    return Session(spec_text, tuple(item.name for item in spec.inputs), forward_steps(spec),
                   traces, result)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the capture, as it was afterwards. A capture
    makes hundreds of thousands of small objects while torch holds as many alive, so the
    collector's full sweeps took a fifth to a third of a deep model's capture; the capture
    makes few cycles, and they are collected when it is back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def walk(spec: ModelSpec, spec_path: str) -> Walk:
    """Run the spec's two passes and everything walk shows about them."""
    return _walk(spec, spec_path, None, _silent)[0]


def _silent(stage: str) -> None:
    pass


def _walk(spec: ModelSpec, spec_path: str, make: Builder | None,
          progress: Progress) -> tuple[Walk, tuple[PassTrace, ...]]:
    fresh = make or (lambda: build(spec))
    progress(STAGES[0])
    legacy = trace(fresh(), "legacy")
    progress(STAGES[1])
    full = trace(fresh(), "full")
    with whole_names(spec.python is not None):
        return _label_and_check(spec, spec_path, legacy, full, fresh, progress), (legacy, full)


def _label_and_check(spec: ModelSpec, spec_path: str, legacy: PassTrace, full: PassTrace,
                     make: Builder, progress: Progress) -> Walk:
    progress(STAGES[2])
    labelled = [label_pass(trace) for trace in (legacy, full)]
    view, _ = labelled[0]
    progress(STAGES[3])
    replay = Replay(spec, legacy, [view.name_of(node) for node in view.order], make)
    passes = []
    for stage, trace_, (pass_view, events) in zip(STAGES[4:6], (legacy, full), labelled,
                                                   strict=True):
        progress(stage)
        passes.append(_walk_pass(trace_, pass_view, events, replay))
    progress(STAGES[6])
    derivations = _derivations(spec, legacy, view, replay)
    runs = _run_steps(spec, legacy, view, replay)
    progress(STAGES[7])
    return Walk(
        spec=spec_path,
        name=spec.name,
        about=spec.about,
        torch=torch.__version__,
        passes=tuple(passes),
        derivations=derivations,
        interventions=len(spec.interventions),
        runs=runs,
        lessons=_lessons(spec),
        whole_names=spec.python is not None,
    )


def _lessons(spec: ModelSpec) -> Lessons:
    """The lessons the spec asks for, each computed on its own fresh builds; each lesson's
    module is imported only when the spec asks for that lesson."""
    vjp: tuple[VjpLesson, ...] = ()
    if any(item.gradient is not None for item in spec.backwards) or any(
            call.grad_outputs is not None for call in spec.grads):
        from gradexplain.capture.lessons.vjp import vjp_lessons

        vjp = vjp_lessons(spec, inputs_first=True)
    interventions: tuple[InterventionLesson, ...] = ()
    if spec.interventions:
        from gradexplain.capture.lessons.interventions import intervention_lessons

        interventions = intervention_lessons(spec)
    captures: tuple[CaptureLesson, ...] = ()
    if spec.captures:
        from gradexplain.capture.lessons.captures import capture_lessons

        captures = capture_lessons(spec)
    return Lessons(vjp, interventions, captures)


def check(value: TensorValue | None, expected: torch.Tensor) -> Check:
    """Compare a recorded value with the independently computed one."""
    expected_value = tensor_value(expected)
    if value is None:
        return Check(False, math.inf, expected_value)
    if tuple(value.shape) != tuple(expected.shape):
        return Check(False, math.inf, expected_value)
    reference = expected.detach().double()
    if value.value is None:
        assert value.summary is not None
        got = torch.tensor([value.summary.min, value.summary.max, value.summary.mean,
                            value.summary.norm], dtype=torch.float64)
        reference = torch.stack([reference.min(), reference.max(), reference.mean(),
                                 reference.norm()])
    else:
        got = torch.tensor(value.value, dtype=torch.float64)
    verified, error = agreement(got, reference, RELATIVE_TOLERANCE, ABSOLUTE_FLOOR)
    return Check(verified, error, expected_value)


def _walk_pass(trace: PassTrace, view: GraphView, events: list[EventLabels],
               replay: Replay) -> PassWalk:
    if [view.name_of(node) for node in view.order] != [node.name() for node in replay.order]:
        raise AssertionError(f"the {trace.mode} pass's graph differs from the check run's")
    labelled = tuple(_labelled_event(item, replay) for item in events)
    return PassWalk(trace.mode, labelled, _final_grads(trace, view, replay),
                    _warnings(trace))


def _labelled_event(item: EventLabels, replay: Replay) -> LabelledEvent:
    event = item.event
    args = []
    for arg, label in zip(event.args, item.labels, strict=True):
        result = None
        # A call torch refused has nothing in the hook-free run to be checked against.
        if label.site is not None and arg.value is not None and label.site.run in replay.runs:
            result = check(arg.value, replay.expected(label.site, arg.value.shape))
        args.append(LabelledArg(arg.name, arg.value, label.meaning, result))
    return LabelledEvent(event.seq, event.phase, event.run, event.hook, event.target,
                         event.node, tuple(args), item.why, item.call)


def _final_grads(trace: PassTrace, view: GraphView, replay: Replay) -> tuple[FinalGrad, ...]:
    """Each leaf's `.grad` after the pass, checked against the backward calls it summed."""
    summed = trace.summed_runs(len(trace.runs))
    grads = []
    for name, value in trace.grads:
        result = None
        if summed:
            total: torch.Tensor | None = None
            for run in summed:
                found = _leaf_total(trace, view, replay, name, run.index)
                if found is not None:
                    total = found if total is None else total + found
            if total is not None or value is not None:
                result = check(value, total if total is not None
                               else torch.zeros(value.shape if value else ()))
        grads.append(FinalGrad(name, value, result))
    return tuple(grads)


def _leaf_total(trace: PassTrace, view: GraphView, replay: Replay, leaf: str,
                run: int) -> torch.Tensor | None:
    """What call `run` computes for `leaf` in the hook-free run (None: it does not reach it)."""
    record = trace.named(leaf)
    position = view.resolve(view.raw_position(record.index if record else None))
    values = replay.runs.get(run)
    if position is None or values is None:
        return None
    return values.totals.get((view.rank[position[0]], position[1]))


def _run_steps(spec: ModelSpec, trace: PassTrace, view: GraphView,
               replay: Replay) -> tuple[RunStep, ...]:
    """Every call in order: each leaf's `.grad` before, what the call adds, after (checked:
    after = before + added; autograd.grad adds nothing), and torch's error explained."""
    steps = []
    for run in trace.runs:
        backward = run.kind == "backward"
        retain = (spec.backwards[run.call].retain_graph if backward
                  else spec.grads[run.call].retain_graph)
        before = dict(run.before)
        leaves = []
        for name, after in run.after:
            added = (_leaf_total(trace, view, replay, name, run.index)
                     if backward and not run.failed else None)
            result = None if run.failed else _accumulated(before.get(name), added, after)
            leaves.append(LeafGrad(name, before.get(name), _value(added), after, result))
        explanation = None
        if run.error is not None:
            earlier = tuple(item.index for item in trace.runs[:run.index - 1]
                            if item.of == run.of
                            or (item.root is not None and item.root == run.root))
            attempt = Attempt(run.kind, run.of, run.seed is not None, retain, earlier)
            explanation = explain(run.error, attempt)
        posted = sum(1 for event in trace.events
                     if event.run == run.index and event.hook == "post_accumulate_grad")
        steps.append(RunStep(run.index, run.kind, run.of, run.wrt, run.seed,
                             backward and run.fresh and run.index > 1, retain, tuple(leaves),
                             posted, run.error, explanation))
    return tuple(steps)


def _accumulated(before: TensorValue | None, added: torch.Tensor | None,
                 after: TensorValue | None) -> Check | None:
    """Check `.grad` after a call against before + what the call computed for it."""
    if before is not None and before.value is None:
        return None  # summarised: too large to add up here
    expected = added.detach().double() if added is not None else None
    if before is not None:
        base = torch.tensor(before.value, dtype=torch.float64)
        expected = base if expected is None else base + expected
    if expected is None:
        return Check(after is None, 0.0 if after is None else math.inf, None)
    return check(after, expected)


def _warnings(trace: PassTrace) -> tuple[ModuleWarning, ...]:
    """torch's warnings, once per module and message, attached to the event they followed."""
    counts: Counter[tuple[str | None, str, str, str]] = Counter()
    for warning in trace.warnings:
        module = None
        if warning.after_seq is not None:
            event: Event = trace.events[warning.after_seq]
            if event.hook in ("forward", "forward_pre", "backward", "full_backward",
                              "full_backward_pre"):
                module = event.target
        counts[(module, warning.category, warning.message, warning.phase)] += 1
    return tuple(ModuleWarning(module, category, message, phase, count)  # type: ignore[arg-type]
                 for (module, category, message, phase), count in counts.items())


def _derivations(spec: ModelSpec, trace: PassTrace, view: GraphView,
                 replay: Replay) -> tuple[Derivation, ...]:
    """The chain rule of each distinct call, node by node from the output back to the leaves."""
    done: dict[int, int] = {}
    derivations = []
    operands = _written_operands(spec)
    for run in trace.runs:
        values = replay.runs.get(run.index)
        if values is None or run.failed:
            continue  # torch refused this call: there is no chain rule to show
        if id(values) in done:
            continue
        done[id(values)] = run.index
        traced = _traced(trace, run.index)
        lines = [_line(view, values, node, traced.get(node), operands) for node in
                 _topological(view, set(traced))]
        derivations.append(Derivation(run.index, run.kind, run.of,
                                      None if values.seed is None else tensor_value(values.seed),
                                      tuple(lines)))
    return tuple(derivations)


def _topological(view: GraphView, ran: set[str]) -> list[str]:
    """The nodes torch ran in this call, each after every node that feeds it (ties: graph
    order). An autograd.grad call runs only what its `wrt` needs."""
    active = [node for node in view.order if node in ran]
    waiting = dict.fromkeys(active, 0)
    for position, users in view.consumers.items():
        if position[0] in waiting:
            waiting[position[0]] += sum(1 for user, _ in users if user in ran)
    ready = [node for node in active if waiting[node] == 0]
    order: list[str] = []
    while ready:
        ready.sort(key=lambda node: view.rank[node])
        node = ready.pop(0)
        order.append(node)
        for child, output in view.nodes[node].next:
            target = view.resolve((child, output))
            if target is not None and target[0] in waiting:
                waiting[target[0]] -= 1
                if waiting[target[0]] == 0:
                    ready.append(target[0])
    return order


def _written_operands(spec: ModelSpec) -> dict[str, tuple[str | None, ...]]:
    """For each step `t = a op b`, the operands as written, by every name of `t`: a number or
    a tensor that needs no gradient has no graph edge, and is named from here instead."""
    found: dict[str, tuple[str | None, ...]] = {}
    for module in spec.root.walk():
        for step in module.steps:
            expr = step.assignment.expr
            if isinstance(expr, BinOp) and len(step.targets) == 1:
                found[module.qualify(step.targets[0])] = tuple(
                    _written(side) for side in (expr.left, expr.right))
    return found


def _written(expr: object) -> str | None:
    if isinstance(expr, Name):
        return expr.id
    if isinstance(expr, Number):
        return str(expr.value)
    return None


def _line(view: GraphView, values: RunValues, node: str,
          traced: list[TensorValue | None] | None,
          operands: dict[str, tuple[str | None, ...]]) -> DerivationLine:
    """One node: `traced` is what the traced pass saw flow out of it (see `_traced`)."""
    rank = view.rank[node]
    name = view.name_of(node)
    output = _tensor_name(view, (node, 0))
    upstream = values.totals.get((rank, 0))
    if name == ACCUMULATE:
        seen = traced[0] if traced else None
        result = None if seen is None or upstream is None else check(seen, upstream)
        term = Term(output, f"{short_name(output)}.grad += g", _value(upstream), result)
        return DerivationLine(name, output, _value(upstream), (term,), True)
    edges = view.nodes[node].next
    inputs = [_tensor_name(view, view.resolve(edge)) for edge in edges]
    written = next((operands[item] for item in view.names.get((node, 0), []) if item in operands),
                   ())
    shown = list(inputs)
    for index, item in enumerate(inputs):
        replacement = written[index] if index < len(written) else None
        if item == "None" and replacement is not None:
            shown[index] = replacement
    formulas, has_rule = local_derivatives(name, [_operand(item) for item in shown],
                                           _operand(output))
    terms = []
    for index, (wrt, formula) in enumerate(zip(inputs, formulas, strict=True)):
        seen = traced[index] if traced is not None and index < len(traced) else None
        if edges[index][0] is None or seen is None:
            continue  # no input there, or torch did not need it in this call
        share = values.edges.get((rank, index))
        result = None if share is None else check(seen, share)
        terms.append(Term(wrt, formula, _value(share), result))
    return DerivationLine(name, output, _value(upstream), tuple(terms), has_rule)


def _traced(trace: PassTrace, run: int) -> dict[str, list[TensorValue | None]]:
    """Each node torch ran in this run, with what the traced pass saw flowing out of it: its
    Node hook's grad_inputs, or for a leaf's AccumulateGrad what its pre-hook received."""
    found: dict[str, list[TensorValue | None]] = {}
    for event in trace.events:
        if event.run != run or event.node_id is None:
            continue
        if event.hook == "node" and event.node != ACCUMULATE:
            found[event.node_id] = [arg.value for arg in event.args
                                    if arg.name.startswith("grad_inputs")]
        elif event.hook == "node_pre" and event.node == ACCUMULATE:
            found[event.node_id] = [arg.value for arg in event.args]
    return found


def _tensor_name(view: GraphView, position: tuple[str, int] | None,
                 seen: frozenset[tuple[str, int]] = frozenset()) -> str:
    """A tensor's name in the derivation: its own, or what it is a view of (`weightᵀ`).
    `seen`: the positions already asked about on the way here, so that an unnamed tensor
    whose only use is an unnamed view of it is named by its op instead of asking forever."""
    if position is None:
        return "None"
    own = canonical_name(view.names.get(position, []))
    if own is not None:
        return own
    seen = seen | {position}
    node = view.nodes[position[0]]
    kind = VIEWS.get(node.name)
    if kind is not None and node.next and node.next[0][0] is not None:
        below = view.resolve(node.next[0])
        if below not in seen:
            base = short_name(_tensor_name(view, below, seen))
            return f"{base}ᵀ" if kind == "transpose" else f"{base} ({kind}ed)" \
                if kind == "expand" else f"{base} (reshaped)"
    users = view.consumers.get(position, [])
    if len(users) == 1 and VIEWS.get(view.name_of(users[0][0])) in ("reshape", "transpose") \
            and (users[0][0], 0) not in seen:
        above = short_name(_tensor_name(view, (users[0][0], 0), seen))
        return f"{above} (reshaped)"
    op = node.name.removesuffix("Backward0").removesuffix("Backward1").lower()
    return f"{op}#{view.rank[node.id]}"


def _operand(name: str) -> str:
    """A name as it reads inside a formula: `weightᵀ` becomes `(weightᵀ)`, so `(weightᵀ)ᵀ`."""
    short = short_name(name)
    return short if re.fullmatch(r"[\w@:#]+", short, re.ASCII) else f"({short})"


def _value(tensor: torch.Tensor | None) -> TensorValue | None:
    return None if tensor is None else tensor_value(tensor)


__all__ = ["capture", "check", "walk"]
