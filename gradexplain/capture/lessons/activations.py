"""The activations lesson (a spec's `captures:`): the hooks tutorial's class-activation-map
pattern of storing activations with a forward hook, checked.

For each `captures:` item of a spec (`save_feat: net.conv1`), on a fresh build: register a forward
hook on the module that appends its output to a list, exactly as the article's `hook_func` fills
its global `save_feat`; run the forward; and, where the spec says `remove_after: N`, call
`handle.remove()` after the N-th forward and run one forward more, to show that the hook no longer
fires and the list stops growing. Every stored entry is then checked against an independent
computation: what the module's call returns in a hook-free run of another build, whether a step
names that value (`net.c1` for `c1 = conv1(x)`) or passes it straight on (`conv1(x)` in
`c1 = sigmoid(conv1(x))`, shown as `net.c1:conv1`). A module called several times per forward
makes the hook fire once per call, and each call's entry is checked against that call's value.

`activation_lessons(spec)` is the entry point; it returns plain data
(`records/lessons/activations.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

import torch
from torch import nn

from gradexplain.capture.build import build
from gradexplain.capture.checks import RECOMPUTED, agreement
from gradexplain.capture.values import tensor_value
from gradexplain.language.expr import BinOp, Call, Expr, Index, Neg, Transpose
from gradexplain.language.model import Capture, ModelSpec
from gradexplain.records.lessons.activations import ActivationLesson, ForwardCall, StoredEntry
from gradexplain.records.trace import TensorValue

Outputs = tuple[torch.Tensor, ...]


def activation_lessons(spec: ModelSpec) -> tuple[ActivationLesson, ...]:
    """Every capture of `spec`, run as the article does and checked (in spec order)."""
    return tuple(activation_lesson(spec, capture) for capture in spec.captures)


def activation_lesson(spec: ModelSpec, capture: Capture) -> ActivationLesson:
    """One capture: hook, forward(s), `handle.remove()`, and the checks."""
    names = output_names(spec, capture.module)
    expected = hook_free_outputs(spec, capture.module)
    forward_count = 1 if capture.remove_after is None else capture.remove_after + 1
    saved, forwards = _run_hooked(spec, capture, forward_count)

    stored: list[StoredEntry] = []
    position = 0
    for forward in forwards:
        for call in range(forward.entries):
            reference = expected[call] if call < len(expected) else None
            verified, error = (False, math.inf) if reference is None else check_entry(
                saved[position], reference)
            stored.append(StoredEntry(
                index=position,
                forward=forward.number,
                call=call,
                values=tuple(_value(tensor) for tensor in saved[position]),
                verified=verified,
                max_abs_err=error,
                expected=None if not reference else tensor_value(reference[0]),
            ))
            position += 1

    # The counts are the lesson as much as the values: once per call while hooked, never after
    # handle.remove().
    counts_right = all(forward.entries == (len(expected) if forward.hooked else 0)
                       for forward in forwards)
    errors = [entry.max_abs_err for entry in stored]
    max_abs_err = max(errors, default=0.0) if counts_right else math.inf
    return ActivationLesson(
        name=capture.name,
        module=capture.module,
        output_names=names,
        calls_per_forward=len(expected),
        output_shape=tuple(expected[0][0].shape) if expected and expected[0] else None,
        remove_after=capture.remove_after,
        forwards=tuple(forwards),
        stored=tuple(stored),
        verified=counts_right and all(entry.verified for entry in stored),
        max_abs_err=max_abs_err,
    )


def output_names(spec: ModelSpec, module: str) -> tuple[str, ...]:
    """What the forward calls the module's output, call site by call site, in the order the
    modules are declared: the targets of a step that is the call (`net.c1` for
    `c1 = conv1(x)`), `<step's first target>:<callee>` for a call inside a larger expression
    (`net.c1:conv1` for `c1 = sigmoid(conv1(x))`). Names only: the values are read in
    `hook_free_outputs`.

    The top-level model ("") is called by no step: its output is what the model returns.
    """
    if module == "":
        return tuple(spec.root.qualify(name) for name in spec.root.returns)
    names: list[str] = []
    for owner in spec.root.all_modules()[1:] + [spec.root]:
        callables = {layer.name for layer in owner.layers} | {child.name for child in owner.modules}
        for step in owner.steps:
            expr = step.assignment.expr
            for call in _calls(expr):
                if call.func not in callables or owner.qualify(call.func) != module:
                    continue
                if call is expr:
                    names += [owner.qualify(target) for target in step.targets]
                else:
                    names.append(f"{owner.qualify(step.targets[0])}:{call.func}")
    return tuple(dict.fromkeys(names))


def hook_free_outputs(spec: ModelSpec, module: str) -> list[Outputs]:
    """The module's output at each of its calls in one forward of a fresh build, no hook on it.

    Not read from a hook, so the check does not depend on the mechanism it checks, and not from
    the named values the forward reports either: a call inside a larger expression
    (`sigmoid(conv1(x))`) has no name. In this build a stand-in module takes the module's place
    in its parent, calls it and keeps a copy of what each call returns, in call order (a parent
    called twice calls it twice).
    """
    built = build(spec)
    if module == "":
        output = built.model(*built.inputs)
        return [_tensors(output)]
    parent_path, _, child = module.rpartition(".")
    parent: nn.Module = dict(built.model.named_modules())[parent_path]
    recorder = _Recorder(getattr(parent, child))
    setattr(parent, child, recorder)
    built.model(*built.inputs)
    return recorder.calls


class _Recorder(nn.Module):
    """Stands in for a module: calls it and keeps a detached copy of each call's output (a
    later in-place op must not change what was kept, as the hooked run keeps copies too)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.calls: list[Outputs] = []

    def forward(self, *args: Any) -> Any:
        output = self.inner(*args)
        self.calls.append(tuple(tensor.detach().clone() for tensor in _tensors(output)))
        return output


def _calls(expr: Expr) -> list[Call]:
    """Every call in an expression, arguments before the call that takes them (the order
    they run in: `lin(lin(x))` calls the inner `lin` first)."""
    if isinstance(expr, Call):
        found: list[Call] = []
        for arg in (*expr.args, *(value for _, value in expr.kwargs)):
            found += _calls(arg)
        return [*found, expr]
    if isinstance(expr, BinOp):
        return _calls(expr.left) + _calls(expr.right)
    if isinstance(expr, Neg | Transpose | Index):
        return _calls(expr.operand)
    return []


def check_entry(stored: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]
                ) -> tuple[bool, float]:
    """Whether a stored output equals the hook-free one (`agreement`), and the largest error.

    A different number of tensors or a different shape is a failure with error inf.
    """
    if len(stored) != len(expected):
        return False, math.inf
    verdicts = [agreement(got, want, RECOMPUTED)
                for got, want in zip(stored, expected, strict=True)]
    return (all(verified for verified, _ in verdicts),
            max((error for _, error in verdicts), default=0.0))


def _run_hooked(spec: ModelSpec, capture: Capture,
                forward_count: int) -> tuple[list[Outputs], list[ForwardCall]]:
    """The article's pattern on a fresh build: hook, forward, handle.remove(), forward again."""
    built = build(spec)
    target: nn.Module = dict(built.model.named_modules())[capture.module]
    save_feat: list[Outputs] = []

    def hook_func(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        # A copy, detached: the list must keep this call's activation even if a later in-place
        # op changes the tensor, and must not keep the graph alive.
        save_feat.append(tuple(tensor.detach().clone() for tensor in _tensors(output)))

    forwards: list[ForwardCall] = []
    with ExitStack() as hooks:
        handle = target.register_forward_hook(hook_func)
        # Only a safety net, for an error mid-way or a capture the user never removes: the lesson
        # is the explicit handle.remove() below, which makes the stack's own remove a no-op.
        hooks.enter_context(handle)
        hooked = True
        if capture.remove_after == 0:
            handle.remove()
            hooked = False
        for number in range(1, forward_count + 1):
            before = len(save_feat)
            built.model(*built.inputs)
            entries = len(save_feat) - before
            remove_now = hooked and capture.remove_after == number
            forwards.append(ForwardCall(number=number, hooked=hooked, fired=entries > 0,
                                        entries=entries, stored_count=len(save_feat),
                                        removed_after=remove_now))
            if remove_now:
                handle.remove()
                hooked = False
    return save_feat, forwards


def _tensors(value: Any) -> Outputs:
    """A module's output as a tuple of tensors (a composite module may return several)."""
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, tuple | list):
        return tuple(item for item in value if isinstance(item, torch.Tensor))
    return ()


def _value(tensor: torch.Tensor) -> TensorValue:
    value = tensor_value(tensor)
    assert value is not None
    return value


__all__ = ["activation_lesson", "activation_lessons", "check_entry", "hook_free_outputs",
           "output_names"]
