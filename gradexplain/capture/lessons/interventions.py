"""The intervention lesson: a hook that returns a replacement gradient, run, compared and checked.

The walk's two labelled passes never replace anything, so every label keeps its derivative
meaning. Each `interventions:` item gets its own comparison instead, on fresh identical builds
(`build(spec)` is deterministic):

1. without: the spec's first differentiation meant to succeed (a `backward:` item, else a
   `grad:` call), with a tensor hook recording every named tensor's gradient, and every leaf's
   final `.grad` (or what autograd.grad returned);
2. with: the same, plus the intervention's hook, which replaces what torch passes it by the
   action's result and records both (these two runs: `intervention_runs.py`);
3. a check in a third, hook-free build: what the gradients with the hook must be, by linearity,
   and the rule in words (`intervention_hook_free.py`).

`wrong_length` and `wrong_shape` return what torch refuses: the lesson keeps torch's message and
states the rule the replacement broke. `intervention_lessons(spec)` is the entry point; it
returns plain data (`records/lessons/interventions.py`).
"""

from __future__ import annotations

import dataclasses
import warnings

from gradexplain.capture.build import make_tensor
from gradexplain.capture.lessons.intervention_hook_free import HookFree
from gradexplain.capture.lessons.intervention_runs import Goal, replace, run
from gradexplain.capture.values import tensor_value
from gradexplain.errors import ExpectationError, first_line, first_line_of
from gradexplain.language.model import BackwardSpec, Intervention, ModelSpec
from gradexplain.records.lessons.interventions import InterventionLesson
from gradexplain.records.numbers import fmt, fmt_value


def intervention_lessons(spec: ModelSpec) -> tuple[InterventionLesson, ...]:
    """Every intervention of `spec`, run without and with its hook and checked (spec order).

    Raises ExpectationError when an intervention says torch will refuse its replacement
    (`expect_error:`) and torch accepts it.
    """
    goal = first_goal(spec)
    return tuple(intervention_lesson(spec, item, goal) for item in spec.interventions)


def first_goal(spec: ModelSpec) -> Goal | None:
    """The differentiation both runs make: the first backward meant to succeed, else the first
    autograd.grad call meant to succeed (None when every call expects an error)."""
    for backward in spec.backwards:
        if backward.expect_error is None:
            return backward
    for call in spec.grads:
        if call.expect_error is None:
            return call
    return None


def intervention_lesson(spec: ModelSpec, item: Intervention,
                        goal: Goal | None) -> InterventionLesson:
    """One intervention: the run without it, the run with it, the check, the rule."""
    bare = InterventionLesson(
        hook=item.hook, target=item.target, action=item.action, describe=describe_action(item),
        call="", node=None, replaced=(), changes=(), verified=None, max_abs_err=0.0,
        rule="nothing was run: every backward and grad call of the spec expects an error",
        expect_error=item.expect_error)
    if goal is None:
        return bare
    without = run(spec, goal, None)
    with warnings.catch_warnings(record=True) as caught:
        # Recorded, not printed: what torch warns about the hook belongs to the lesson.
        warnings.simplefilter("always")
        with_ = run(spec, goal, item)
    warned = tuple(dict.fromkeys(first_line_of(str(entry.message)) for entry in caught))
    hook = with_.hook
    assert hook is not None
    reference = HookFree(spec, goal, item, hook)
    replaced = tuple(reference.replacements())
    error = with_.error or without.error
    if item.expect_error is not None and error is None:
        raise ExpectationError(f"expected torch to refuse the {item.action} replacement with an "
                               f"error containing {item.expect_error!r}, but the backward "
                               "succeeded", item.where)
    ran = dataclasses.replace(bare, call=call_text(goal), node=hook.node_name,
                              replaced=replaced, warnings=warned)
    if error is not None:
        message = first_line(error)
        if without.error is not None:
            message = f"even without the hook: {message}"
        expected = (item.expect_error is not None
                    and item.expect_error.lower() in str(error).lower())
        return dataclasses.replace(
            ran, rule="torch refused the replacement, so no gradient was computed with it",
            error=message, error_rule=reference.error_rule(), expected_error=expected)
    changes = reference.changes(without, with_)
    checked = [change for change in changes if change.verified is not None]
    errors = [change.max_abs_err for change in checked if change.max_abs_err is not None]
    return dataclasses.replace(
        ran, changes=changes,
        verified=all(change.verified for change in checked) if checked else None,
        max_abs_err=max(errors, default=0.0), rule=reference.rule(changes))


# --- the action ---------------------------------------------------------------------------------


def describe_action(item: Intervention) -> str:
    """The action in words: `normalize: divide every gradient by the sum of all their elements`."""
    if item.action == "normalize":
        return ("normalize: divide every gradient by the sum of all their elements, so together "
                "they sum to 1")
    if item.action == "scale":
        assert item.factor is not None
        return f"scale: multiply every gradient by {fmt(item.factor)}"
    if item.action == "zero":
        return "zero: replace every gradient by zeros of its shape"
    if item.action == "clip":
        low = "-inf" if item.min is None else fmt(item.min)
        high = "inf" if item.max is None else fmt(item.max)
        return f"clip: clamp every element to [{low}, {high}]"
    if item.action == "wrong_length":
        return "wrong_length: return one gradient more than torch passed (torch refuses)"
    return ("wrong_shape: return the first gradient with one element more than torch passed "
            "(torch refuses)")


def call_text(goal: Goal) -> str:
    """The differentiation as Python: `output.backward()`, `torch.autograd.grad(y, x, ...)`."""
    if isinstance(goal, BackwardSpec):
        args = [] if goal.gradient is None else [
            f"gradient={fmt_value(tensor_value(make_tensor(goal.gradient)))}"]
        if goal.retain_graph:
            args.append("retain_graph=True")
        return f"{goal.of}.backward({', '.join(args)})"
    wrt = goal.wrt[0] if len(goal.wrt) == 1 else f"[{', '.join(goal.wrt)}]"
    args = [goal.of, wrt]
    outputs = goal.grad_outputs
    if outputs is not None:
        if outputs.kind == "ones":
            args.append("grad_outputs=ones")
        elif outputs.kind == "one_hot":
            args.append(f"grad_outputs=one_hot({outputs.column})")
        else:
            assert outputs.value is not None
            args.append(f"grad_outputs={fmt_value(tensor_value(make_tensor(outputs.value)))}")
    return f"torch.autograd.grad({', '.join(args)})"


__all__ = ["call_text", "describe_action", "first_goal", "intervention_lesson",
           "intervention_lessons", "replace"]
