"""Each pass checked: every labelled hook argument and final `.grad` against the hook-free run,
every backward or autograd.grad call with the `.grad`s around it, and torch's warnings.
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from gradexplain.capture.checks import check
from gradexplain.capture.label import EventLabels
from gradexplain.capture.lessons.torch_errors import explain_error
from gradexplain.capture.replay import Replay
from gradexplain.capture.trace import tensor_value
from gradexplain.language.model import ModelSpec
from gradexplain.records.graph import GraphView
from gradexplain.records.lessons.torch_errors import Attempt
from gradexplain.records.trace import Event, PassTrace, TensorValue
from gradexplain.records.walk import (
    Check,
    FinalGrad,
    LabelledArg,
    LabelledEvent,
    LeafGrad,
    ModuleWarning,
    PassWalk,
    RunStep,
)


def checked_pass(trace: PassTrace, view: GraphView, events: list[EventLabels],
               replay: Replay) -> PassWalk:
    if [view.name_of(node) for node in view.order] != [node.name() for node in replay.order]:
        raise AssertionError(f"the {trace.mode} pass's graph differs from the check run's")
    labelled = tuple(_labelled_event(item, replay) for item in events)
    return PassWalk(trace.mode, labelled, _final_grads(trace, view, replay),
                    _warnings(trace), trace.refusals)


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


def run_steps(spec: ModelSpec, trace: PassTrace, view: GraphView,
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
            leaves.append(LeafGrad(name, before.get(name), tensor_value(added), after, result))
        explanation = None
        if run.error is not None:
            earlier = tuple(item.index for item in trace.runs[:run.index - 1]
                            if item.of == run.of
                            or (item.root is not None and item.root == run.root))
            attempt = Attempt(run.kind, run.of, run.seed is not None, retain, earlier)
            explanation = explain_error(run.error, attempt)
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


__all__ = ["checked_pass", "run_steps"]
