"""The in-place probe: which modules torch would refuse full backward hooks on, found before the
full pass so that the pass can leave them off those modules and hook everything else.

Full hooks wrap a module's positional tensor inputs (before its forward) and its outputs (after
it returns) in BackwardHookFunction views, whenever grad mode is on and one of them requires
grad. torch forbids changing such a view in place, and also changing anything that shares its
memory (its base, another view, a `.detach()`): the first raises at once, the second the next
time the view is used. Every tensor sharing memory shares one version counter, so one
hook-free forward of a fresh build finds both: the probe notes the version of each tensor a
wrapper would wrap, and a module is refused when that version moves while the wrapper is live,
during its forward for inputs and after it returned for outputs (facts file, B03 and B04).

A TorchFunctionMode sees every torch call of the forward and compares its tensor arguments'
versions before and after: a call that moved one is an in-place op, named (`relu_`, `add_`, with
the Python operator where its source line shows one: `+=`) together with the module whose
forward was running. Only forward pre-hooks and forward hooks are registered here.
"""

from __future__ import annotations

import ast
import linecache
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradexplain.capture.build import Builder, Built
from gradexplain.records.trace import Refusal, RefusalReason

# Augmented assignments by the op torch runs for them: `out += identity` calls add_.
_OPERATORS: dict[type[ast.operator], tuple[str, str]] = {
    ast.Add: ("add_", "+="), ast.Sub: ("sub_", "-="), ast.Mult: ("mul_", "*="),
    ast.Div: ("div_", "/="), ast.Pow: ("pow_", "**="), ast.FloorDiv: ("floor_divide_", "//="),
    ast.Mod: ("remainder_", "%="), ast.BitAnd: ("bitwise_and_", "&="),
    ast.BitOr: ("bitwise_or_", "|="), ast.BitXor: ("bitwise_xor_", "^="),
}
# Frames from these directories are torch's or ours, never the line that wrote the op.
_LIBRARY_DIRS = (str(Path(torch.__file__).parent), str(Path(__file__).parents[1]))


@dataclass(frozen=True)
class Probe:
    """What the probe found: the refusals torch would make, and the wider set to fall back on
    (every module call with a tensor that shares memory with one changed in place, at any time)
    if the full pass hits torch's refusal anyway."""

    refusals: tuple[Refusal, ...]
    wider: tuple[Refusal, ...]


def probe_inplace(fresh: Builder) -> Probe:
    """Run a fresh build forward, hook-free but for forward (pre-)hooks, and find the
    refusals. Only where a tensor was changed in place does a second forward, on another
    fresh build, watch every torch call to name the op (most models have none: one cheap
    forward)."""
    found = _probe(fresh(), watch_calls=False)
    if not found.refusals and not found.wider:
        return found
    return _probe(fresh(), watch_calls=True)


def _probe(built: Built, watch_calls: bool) -> Probe:
    watcher = _Watcher()
    with ExitStack() as hooks:
        for path, module in built.model.named_modules():
            hooks.enter_context(module.register_forward_pre_hook(watcher.entering(path)))
            hooks.enter_context(module.register_forward_hook(watcher.leaving(path)))
        if watch_calls:
            hooks.enter_context(_InPlaceMode(watcher.changed))
        built.forward()
    return watcher.result()


@dataclass
class _Watch:
    """A tensor a full hook wrapper would wrap, and its version when it was wrapped."""

    module: str
    reason: RefusalReason
    tensor: torch.Tensor
    version: int
    live: bool = True
    found: bool = False

    def moved(self) -> bool:
        return self.tensor._version != self.version


@dataclass
class _Watcher:
    """The modules running (innermost last), the wrappers live, and what was found."""

    running: list[tuple[str, list[_Watch]]] = field(default_factory=list)
    watches: list[_Watch] = field(default_factory=list)
    found: dict[Refusal, None] = field(default_factory=dict)  # ordered set

    def entering(self, path: str) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            inputs = self.watch(path, "input", args)
            self.running.append((path, inputs))
        return hook

    def leaving(self, path: str) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if self.running and self.running[-1][0] == path:
                _, inputs = self.running.pop()
                for watch in inputs:
                    if watch.moved() and not watch.found:
                        # Moved by something the mode did not see as a call: still refused.
                        self.refuse(watch, None, None, None)
                    watch.live = False
            # Only a tensor or a tuple is wrapped (torch warns and leaves dicts and lists).
            if isinstance(output, torch.Tensor | tuple):
                outputs = output if isinstance(output, tuple) else (output,)
                if self.watch(path, "output", outputs) and not _rebuilt(outputs):
                    self.found[Refusal(path, "return_type", type(output).__name__)] = None
        return hook

    def watch(self, path: str, reason: RefusalReason, values: Sequence[Any]) -> list[_Watch]:
        """Watch what BackwardHook._apply_on_tensors would wrap: with grad mode on and one
        tensor requiring grad, every tensor; only those requiring grad become views."""
        tensors = [value for value in values if isinstance(value, torch.Tensor)]
        if not torch.is_grad_enabled() or not any(item.requires_grad for item in tensors):
            return []
        made = [_Watch(path, reason, item, item._version) for item in tensors
                if item.requires_grad]
        self.watches.extend(made)
        return made

    def changed(self, op: str, operator: str | None) -> None:
        """An in-place op just ran: every live wrapper whose tensor it moved is refused."""
        where = self.running[-1][0] if self.running else None
        for watch in self.watches:
            if watch.live and not watch.found and watch.moved():
                self.refuse(watch, op, operator, where)

    def refuse(self, watch: _Watch, op: str | None, operator: str | None,
               where: str | None) -> None:
        watch.found = True
        self.found[Refusal(watch.module, watch.reason, op, operator, where)] = None

    def result(self) -> Probe:
        for watch in self.watches:
            if watch.live and watch.moved() and not watch.found:
                self.refuse(watch, None, None, None)
        refused = {item.module for item in self.found}
        wider = {watch.module: None for watch in self.watches
                 if watch.moved() and watch.module not in refused}
        return Probe(tuple(self.found), tuple(Refusal(module, "aliased") for module in wider))


def _rebuilt(result: tuple[Any, ...]) -> bool:
    """Whether torch's full-hook wrapper can rebuild `result` around the views it makes of
    its tensors: a tuple as `tuple(items)`, any other tuple type as `type(result)(*items)`
    (torch.utils.hooks.BackwardHook._apply_on_tensors), which a namedtuple takes and a
    `torch.return_types` result (`x.sort(1)`, `x.max(1)`) does not."""
    if type(result) is tuple:
        return True
    try:
        type(result)(*result)
    except Exception:  # whatever the type's constructor raises, torch would meet it too
        return False
    return True


class _InPlaceMode(TorchFunctionMode):
    """Calls `changed(op, operator)` after each torch call that changed a tensor argument in
    place (its version moved): `add_`, `relu(..., inplace=True)`, `x[0] = ...`, `out=`."""

    def __init__(self, changed: Callable[[str, str | None], None]) -> None:
        super().__init__()
        self._changed = changed

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        tensors = [item for item in (*args, *kwargs.values()) if isinstance(item, torch.Tensor)]
        before = [item._version for item in tensors]
        result = func(*args, **kwargs)
        if any(item._version != version for item, version in zip(tensors, before, strict=True)):
            op = _op_name(func, kwargs)
            self._changed(op, _operator(op))
        return result


def _op_name(func: Any, kwargs: Mapping[str, Any]) -> str:
    """The in-place op's torch name: `add_`; `relu_` for relu(..., inplace=True)."""
    name = str(getattr(func, "__name__", func))
    if kwargs.get("inplace") is True and not name.endswith("_"):
        return f"{name}_"
    return name


def _operator(op: str) -> str | None:
    """`+=` when the user's line that ran `op` is that augmented assignment, else None (a
    method call, or no source to read: a call torch makes for `+=` and `.add_()` is the same)."""
    if op == "__setitem__":
        return "[...] ="  # only Python's item assignment (or a direct call) gets here
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame = frame.f_back
    if frame is None:
        return None
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    try:
        statement = ast.parse(line).body[0] if line else None
    except SyntaxError:
        return None
    if isinstance(statement, ast.AugAssign):
        known = _OPERATORS.get(type(statement.op))
        if known is not None and known[0] == op:
            return known[1]
    return None


__all__ = ["Probe", "probe_inplace"]
