"""The intervention lesson's two runs: the hook that intervenes, and the differentiation run
without and with it.

`replace` is the action a hook returns in place of what torch passed it; `ReplacingHook`
registers it (`register_backward_hook`, `register_full_backward_hook`,
`register_full_backward_pre_hook` or `Tensor.register_hook`) on a fresh build and records every
call, matched to the module's forward call it belongs to; `run` makes the spec's first
differentiation meant to succeed on a fresh build, with a tensor hook recording every named
tensor's gradient and every leaf's final `.grad` (or what autograd.grad returned). What those
runs should give is computed without hooks, in `intervention_hook_free.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import torch
from torch import nn

from gradexplain.capture.build import Built, build, make_tensor, observe
from gradexplain.capture.values import grad_outputs
from gradexplain.language.model import BackwardSpec, GradCall, Intervention, ModelSpec
from gradexplain.records.lessons.interventions import ChangeKind
from gradexplain.records.names import HOOK_WRAPPER

Node = Any  # torch.autograd.graph.Node: C++ node classes without a usable static type
Grads = tuple[torch.Tensor | None, ...]
Goal = BackwardSpec | GradCall


def replace(item: Intervention, grads: Grads) -> Grads:
    """What the hook returns in place of `grads`; None entries stay None."""
    present = [grad for grad in grads if grad is not None]
    if not present:
        return grads
    if item.action == "normalize":
        # The article adds the gradients up and divides each by the total; with more than one
        # element per gradient, "sum to 1" needs the sum of every element.
        total = torch.stack([grad.sum() for grad in present]).sum()
        return tuple(None if grad is None else grad / total for grad in grads)
    if item.action == "scale":
        assert item.factor is not None
        factor = item.factor
        return tuple(None if grad is None else grad * factor for grad in grads)
    if item.action == "zero":
        return tuple(None if grad is None else torch.zeros_like(grad) for grad in grads)
    if item.action == "clip":
        low, high = item.min, item.max
        return tuple(None if grad is None else grad.clamp(min=low, max=high) for grad in grads)
    if item.action == "wrong_length":
        return grads + (grads[-1],)
    first = next(index for index, grad in enumerate(grads) if grad is not None)
    grad = grads[first]
    assert grad is not None
    longer = torch.cat([grad.detach().flatten(), grad.new_zeros(1)])
    return grads[:first] + (longer,) + grads[first + 1:]


# --- the runs -----------------------------------------------------------------------------------


@dataclasses.dataclass
class HookCall:
    """One call of the intervention hook: the module's forward call it belongs to (from 1),
    what torch passed, and what the hook returned (copies)."""

    call: int
    before: Grads
    after: Grads


class ReplacingHook:
    """The intervention's hook on a fresh build: replaces and records every call."""

    def __init__(self, item: Intervention) -> None:
        self.item = item
        self.calls: list[HookCall] = []
        # Per forward call of the module, the autograd nodes that identify it in backward
        # (several calls of one module each fire the hook, in backward order).
        self.markers: list[set[Node]] = []
        self.node_name: str | None = None
        self.argument = {"backward": "grad_input", "full_backward": "grad_input",
                         "full_backward_pre": "grad_output", "tensor": "grad"}[item.hook]

    def register_on_module(self, module: nn.Module, hooks: ExitStack) -> None:
        hooks.enter_context(module.register_forward_hook(self.forward_seen))
        kind = self.item.hook
        if kind == "full_backward":
            hooks.enter_context(module.register_full_backward_hook(self.module_hook))
        elif kind == "full_backward_pre":
            hooks.enter_context(module.register_full_backward_pre_hook(self.pre_hook))
        else:
            hooks.enter_context(module.register_backward_hook(self.module_hook))

    def register_on_tensor(self, tensor: torch.Tensor, hooks: ExitStack) -> None:
        self.markers.append(set())

        def tensor_hook(grad: torch.Tensor) -> torch.Tensor:
            result = self.replaced((grad,), call=1)[0]
            assert result is not None
            return result

        hooks.enter_context(tensor.register_hook(tensor_hook))  # type: ignore[no-untyped-call]

    def forward_seen(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        """Remember the nodes this forward call's backward hook will run on or next to."""
        kind = self.item.hook
        if kind == "full_backward":
            # Forward hooks see the inputs as wrapped by the full hook's identity node.
            seen = tensors_of(args)
        elif kind == "backward":
            seen = tensors_of(output)[:1]  # the legacy hook sits on the first output's grad_fn
        else:
            seen = tensors_of(output)  # raw: the pre-hook's wrapper is put on after this hook
        markers = {tensor.grad_fn for tensor in seen if tensor.grad_fn is not None}
        self.markers.append(markers)
        if self.node_name is None:
            if kind == "backward":
                self.node_name = next((node.name() for node in markers), None)
            else:
                self.node_name = HOOK_WRAPPER

    def module_hook(self, module: nn.Module, grad_input: Grads, grad_output: Grads) -> Grads:
        return self.replaced(grad_input, self.current_call())

    def pre_hook(self, module: nn.Module, grad_output: Grads) -> Grads:
        return self.replaced(grad_output, self.current_call())

    def replaced(self, grads: Grads, call: int) -> Grads:
        result = replace(self.item, tuple(grads))
        self.calls.append(HookCall(call, _copies(grads), _copies(result)))
        return result

    def current_call(self) -> int:
        """Which forward call of the module this backward hook call belongs to."""
        current = getattr(torch._C, "_current_autograd_node", None)
        node = current() if current is not None else None
        if node is not None:
            # A full pre-hook runs on the output wrapper, whose edges lead to the raw outputs'
            # nodes that the forward hook saw; the other hooks run on a node it saw itself.
            candidates = {node}
            if self.item.hook == "full_backward_pre":
                candidates = {edge for edge, _ in node.next_functions if edge is not None}
            for number, markers in enumerate(self.markers, 1):
                if markers & candidates:
                    return number
        # Backward meets a module's calls from the last to the first.
        return max(1, len(self.markers) - len(self.calls))


@dataclasses.dataclass
class Run:
    """One run of the differentiation on a fresh build, with or without the intervention."""

    built: Built
    named: dict[str, torch.Tensor]
    tensor_grads: dict[str, torch.Tensor]
    finals: dict[str, torch.Tensor | None]
    final_kind: ChangeKind
    # Names of finals whose tensor torch wrapped (a full hook's identity node): a gradient of a
    # different tensor than the hook-free build's, so not checked against it.
    wrapped: set[str] = dataclasses.field(default_factory=set)
    error: RuntimeError | None = None
    hook: ReplacingHook | None = None


def run(spec: ModelSpec, goal: Goal, item: Intervention | None) -> Run:
    built = build(spec)
    named: dict[str, torch.Tensor] = {}
    tensor_grads: dict[str, torch.Tensor] = {}
    hook = None if item is None else ReplacingHook(item)

    remember = namer(named)

    def recorder(name: str) -> Callable[[torch.Tensor], None]:
        def record(grad: torch.Tensor | None) -> None:
            # None reaches a tensor hook on an argument a module never uses (a full hook's
            # wrapper hands it on): there is no gradient to record.
            if grad is not None:
                tensor_grads[name] = grad.detach().clone()
        return record

    with ExitStack() as hooks:
        if item is not None and hook is not None and item.hook != "tensor":
            hook.register_on_module(built.model.get_submodule(item.target), hooks)
        with observe(remember):
            returned = built.forward()
        if item is not None and hook is not None and item.hook == "tensor":
            # Registered before the recorders: hooks on one tensor chain in registration order,
            # so the recorded gradient of the hooked tensor is the replacement.
            hook.register_on_tensor(lookup(item.target, named, built), hooks)
        for name, tensor in named.items():
            if tensor.requires_grad:
                hooks.enter_context(tensor.register_hook(recorder(name)))  # type: ignore[no-untyped-call]

        def tensor_named(name: str) -> torch.Tensor:
            # What a caller of the model holds for a returned name, else the named tensor.
            found = returned.get(name)
            if found is None:
                found = named.get(name)
            return found if found is not None else built.leaves()[name]

        of = tensor_named(goal.of)
        leaves = {name: leaf for name, leaf in built.leaves().items() if leaf.requires_grad}
        error: RuntimeError | None = None
        if isinstance(goal, BackwardSpec):
            gradient = None if goal.gradient is None else make_tensor(goal.gradient)
            try:
                torch.autograd.backward(of, gradient, retain_graph=goal.retain_graph)
            except RuntimeError as exc:
                error = exc
            finals = {name: _copy(leaf.grad) for name, leaf in leaves.items()}
            return Run(built, named, tensor_grads, finals, "leaf", set(), error, hook)
        inputs = [tensor_named(name) for name in goal.wrt]
        seed = None if goal.grad_outputs is None else grad_outputs(goal.grad_outputs, of)
        result: tuple[torch.Tensor | None, ...] = (None,) * len(inputs)
        try:
            result = torch.autograd.grad(of, inputs, seed, retain_graph=goal.retain_graph,
                                         allow_unused=True)
        except RuntimeError as exc:
            error = exc
        finals = {}
        for name, value in zip(goal.wrt, result, strict=True):
            finals.setdefault(name, _copy(value))
        wrapped = {name for name, tensor in zip(goal.wrt, inputs, strict=True)
                   if tensor.grad_fn is not None
                   and tensor.grad_fn.name() == HOOK_WRAPPER}
        return Run(built, named, tensor_grads, finals, "result", wrapped, error, hook)


def namer(named: dict[str, torch.Tensor]) -> Callable[[str, Any], None]:
    """An `observe` callback filling `named`: a name keeps the first tensor it is given; a later
    call of the same module names its values `name@2`, `name@3`, as the walk does."""
    calls: dict[str, int] = {}

    def remember(name: str, value: Any) -> None:
        if not isinstance(value, torch.Tensor):
            return
        calls[name] = calls.get(name, 0) + 1
        named.setdefault(name if calls[name] == 1 else f"{name}@{calls[name]}", value)

    return remember


def tensors_of(value: Any) -> tuple[torch.Tensor, ...]:
    """A module's output or arguments as a tuple of tensors (non-tensors dropped)."""
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, tuple | list):
        return tuple(item for item in value if isinstance(item, torch.Tensor))
    return ()


def lookup(name: str, named: dict[str, torch.Tensor], built: Built) -> torch.Tensor:
    """A named tensor of the forward, else a leaf (parameters are named by no step)."""
    found = named.get(name)
    return found if found is not None else built.leaves()[name]


def _copy(tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else tensor.detach().clone()


def _copies(grads: Grads) -> Grads:
    return tuple(_copy(grad) for grad in grads)


__all__ = ["Goal", "Grads", "HookCall", "ReplacingHook", "Run", "lookup", "namer", "replace", "run",
           "tensors_of"]
