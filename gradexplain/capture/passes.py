"""Each pass checked: every labelled hook argument and final `.grad` against the hook-free run
(each argument pinned to its chain-rule step as its record is made: `pins`), every backward or
autograd.grad call with the `.grad`s around it, and torch's warnings.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import torch

from gradexplain.capture.checks import check, says_too_little
from gradexplain.capture.claims import ClaimChecker, Evaluated
from gradexplain.capture.label import EventLabels
from gradexplain.capture.lessons.torch_errors import explain_error
from gradexplain.capture.pins import Pins
from gradexplain.capture.remembered import forgetting
from gradexplain.capture.replay import Replay, ReplayMismatch
from gradexplain.capture.user_changes import Changes
from gradexplain.capture.values import in_float64, recorded_tensor, tensor_value
from gradexplain.language.model import ModelSpec
from gradexplain.records.graph import GraphView, Signature
from gradexplain.records.lessons.torch_errors import Attempt
from gradexplain.records.trace import Event, PassTrace, TensorValue
from gradexplain.records.walk import (
    Check,
    FinalGrad,
    LabelledArg,
    LabelledEvent,
    LeafGrad,
    ModuleWarning,
    PassFailure,
    PassWalk,
    RunStep,
)

# What an argument that is no derivative (or one a user's hook changed) has for a check.
NOT_EVALUATED = Evaluated(None)


def checked_pass(trace: PassTrace, view: GraphView, events: list[EventLabels],
                 replay: Replay | ReplayMismatch, pins: Pins | None = None) -> PassWalk:
    """Each label's claim evaluated against `replay`; where the check run could not rebuild
    the pass's graph (`ReplayMismatch`), every derivative says so instead of being checked.
    Each argument is pinned to its chain-rule step by `pins` (None: the pass is not)."""
    checker = None
    if isinstance(replay, Replay):
        if view.signature() != replay.signature():
            raise AssertionError(f"the {trace.mode} pass's graph differs from the check run's")
        checker = ClaimChecker(view, replay)
    # Why nothing of this pass could be checked, when its graph could not be rebuilt.
    unchecked = Evaluated(None, str(replay) if checker is None else None)
    changes = Changes(trace, view)
    labelled = tuple(_labelled_event(item, checker, unchecked, changes or None, pins)
                     for item in events)
    grads = _final_grads(trace, view, replay, changes) if isinstance(replay, Replay) else tuple(
        FinalGrad(name, value, None) for name, value in trace.grads)
    return PassWalk(trace.mode, labelled, grads, _warnings(trace), user_hooks=trace.user_hooks,
                    refusals=trace.refusals)


def failed_alone(trace: PassTrace, other: PassTrace) -> tuple[PassFailure, ...]:
    """The calls torch refused in `trace` and the spec did not expect, where `other` ran the
    same call without that error: in the full pass, a hook only it registers (the model's own
    full backward hook) made torch raise, which the walk's calls, the legacy pass's, do not
    show."""
    others = {run.index: run.error for run in other.runs}
    found = []
    for run in trace.runs:
        error, twin = run.error, others.get(run.index)
        if error is None or error.expected or (twin is not None and (
                twin.category, twin.message) == (error.category, error.message)):
            continue
        found.append(PassFailure(run.index, run.kind, run.of, error))
    return tuple(found)


def graph_change(legacy_graph: Signature, full_graph: Signature) -> str | None:
    """How the full pass's graph differs from the legacy pass's, for a reader; None if not.

    Full backward hooks hand a module each tensor argument as a new tensor (a view made by
    BackwardHookFunction): a forward that asks `a is b` takes another path under them."""
    if legacy_graph == full_graph:
        return None
    legacy = Counter(name for name, _ in legacy_graph)
    full = Counter(name for name, _ in full_graph)
    only_full, only_legacy = _ops(full - legacy), _ops(legacy - full)
    difference = "; ".join(part for part in (
        f"only in the full pass: {only_full}" if only_full else "",
        f"only in the legacy pass: {only_legacy}" if only_legacy else "") if part)
    return (f"the full backward hooks changed what the model computes: its autograd graph has "
            f"{len(full_graph)} nodes, the legacy pass's {len(legacy_graph)}"
            f"{f' ({difference})' if difference else ' (the same ops, linked otherwise)'}. "
            "Full hooks hand each module its tensor arguments as new tensors (views made by "
            "BackwardHookFunction), so a forward that tests whether two arguments are the same "
            "tensor (nn.MultiheadAttention's `query is key`, for self-attention) takes another "
            "path. The full pass is checked against a run of the same modules wrapped by hooks "
            "that do nothing, so that it computes the same graph.")


def _ops(counts: Counter[str]) -> str:
    return ", ".join(f"{count} × {name}" if count > 1 else name
                     for name, count in sorted(counts.items()))


def _labelled_event(item: EventLabels, checker: ClaimChecker | None,
                    unchecked: Evaluated, changes: Changes | None,
                    pins: Pins | None) -> LabelledEvent:
    """One event's arguments checked and pinned. `changes`: None where no user's hook changed
    anything in the pass (asked once, not at each of its thousands of arguments)."""
    event = item.event
    args = []
    for arg, label in zip(event.args, item.labels, strict=True):
        result = NOT_EVALUATED
        meaning = label.meaning
        changed_by = None
        if changes is not None and meaning is not None and label.site is not None:
            located = checker.locate(meaning) if checker is not None else None
            changed_by = changes.of_claim(event, arg.name, meaning, label.site.run, located)
        if meaning is not None and changed_by is not None:
            # Not the derivative its label names: the user's hook replaced what flows here.
            meaning = dataclasses.replace(
                meaning, modified=True, modified_by=changed_by,
                text=f"{meaning.text}, as changed by your hook {changed_by}")
        elif label.site is not None and meaning is not None and arg.value is not None:
            result = (unchecked if checker is None
                      else checker.evaluate(meaning, label.site.run, arg.value))
        args.append(LabelledArg(arg.name, arg.value, meaning, result.check,
                                result.not_checked,
                                None if pins is None else pins.of_arg(label, meaning)))
    returned = None if event.returned is None else tuple(
        LabelledArg(arg.name, arg.value, None, None) for arg in event.returned)
    return LabelledEvent(event.seq, event.phase, event.run, event.hook, event.target,
                         event.node, tuple(args), item.why, item.call, event.user, returned,
                         event.changed)


def _final_grads(trace: PassTrace, view: GraphView, replay: Replay,
                 changes: Changes) -> tuple[FinalGrad, ...]:
    """Each leaf's `.grad` after the pass, checked against the backward calls it summed (not
    where one of the user's hooks changed it)."""
    summed = trace.summed_runs(len(trace.runs))
    runs = tuple(run.index for run in summed)
    grads = []
    for name, value in trace.grads:
        result = None
        changed_by = changes.of_leaf(name, runs) if changes else None
        if changed_by is not None:
            grads.append(FinalGrad(name, value, None, changed_by))
            continue
        if summed:
            total: torch.Tensor | None = None
            for run in summed:
                found = _leaf_total(trace, view, replay, name, run.index)
                if found is not None:
                    total = found if total is None else total + found
            if (total is not None or value is not None) and not says_too_little(value):
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
    changes = Changes(trace, view)
    for run in trace.runs:
        backward = run.kind == "backward"
        call = spec.backwards[run.call] if backward else spec.grads[run.call]
        retain = call.retain_graph
        before = dict(run.before)
        leaves = []
        for name, after in run.after:
            added = (_leaf_total(trace, view, replay, name, run.index)
                     if backward and not run.failed else None)
            changed_by = changes.of_leaf(name, (run.index,)) if changes else None
            result = (None if run.failed or changed_by is not None
                      else _accumulated(before.get(name), added, after))
            leaves.append(LeafGrad(name, before.get(name), tensor_value(added), after, result,
                                   changed_by))
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
                             posted, run.error, explanation, call.expect_error))
    return tuple(steps)


def _accumulated(before: TensorValue | None, added: torch.Tensor | None,
                 after: TensorValue | None) -> Check | None:
    """Check `.grad` after a call against before + what the call computed for it."""
    if (before is not None and before.value is None) or says_too_little(after):
        return None  # summarised: too large to add up here, or a summary saying too little
    if before is None and added is not None and added.is_floating_point():
        # Nothing to add to: the expected value is what the call added, in float64. A float
        # converts to float64 exactly, so that is its check (kept with the check run's own
        # tensor) with the expected record in float64; no float64 copy of every gradient.
        found = check(after, added)
        return Check(found.verified, found.max_abs_err, in_float64(found.expected), found.why)
    expected = added.detach().double() if added is not None else None
    if before is not None:
        base = recorded_tensor(before)
        expected = base if expected is None else base + expected
    if expected is None:
        return Check(after is None, 0.0 if after is None else math.inf, None)
    with forgetting():  # a sum made for this check alone: its copy would only cost its size
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


__all__ = ["checked_pass", "failed_alone", "graph_change", "run_steps"]
