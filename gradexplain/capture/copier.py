"""How a Python model is deep-copied for each pass: `copy.deepcopy`, with the modules that keep
nn.Module's own state protocol copied without its generic machinery.

Every pass runs on its own deep copy of the user's model (two passes and the check run), and
`copy.deepcopy` reconstructs each module through `__reduce_ex__`, and each of the module's
fifteen dicts and sets (its parameters, buffers, children and eleven kinds of hooks, mostly
empty) the same way: about 60 microseconds a module, 9 ms a build of the 50-layer MLP's 151
modules.
A module whose class keeps nn.Module's `__getstate__` (and has no `__deepcopy__`,
`__reduce__`, `__reduce_ex__`, `__getnewargs__` or slots of its own) is copied here the way
`copy.deepcopy` would: a new instance of its class registered in the memo first (so that a
cycle or a shared child comes back to it), its state copied value by value, then handed to its
class's `__setstate__` (nn.Module's, or a subclass's such as a convolution's). Dicts, sets and
values copy's own dispatch treats as atoms are copied here too; anything else (a tensor, a
parameter, a list, a user's object) goes to `copy.deepcopy` with the same memo, so sharing
between the two paths holds.
"""

from __future__ import annotations

import copy
import copyreg
import types
from collections import OrderedDict
from typing import Any, cast

from torch import nn

# What `copy.deepcopy` returns as it is (its `_deepcopy_atomic` dispatch).
_ATOMIC: frozenset[type] = frozenset({
    type(None), type(Ellipsis), type(NotImplemented), int, float, bool, complex, bytes, str,
    types.CodeType, type, range, types.BuiltinFunctionType, types.FunctionType, property,
})
_MISSING = object()


def deep_copy(model: nn.Module, memo: dict[int, Any]) -> nn.Module:
    """`copy.deepcopy(model, memo)`, modules of nn.Module's state protocol copied directly."""
    copied: nn.Module = _copy(model, memo)
    return copied


def _copy(value: Any, memo: dict[int, Any]) -> Any:
    found = memo.get(id(value), _MISSING)
    if found is not _MISSING:
        return found
    kind = type(value)
    if kind in _ATOMIC:
        return value
    if (kind is dict or kind is OrderedDict) and not getattr(value, "__dict__", None):
        return _copy_dict(value, memo)
    if kind is set and all(type(item) in _ATOMIC for item in value):
        made = memo[id(value)] = set(value)
        _keep_alive(value, memo)
        return made
    if isinstance(value, nn.Module) and _plain_module(kind) and _plain_instance(value):
        return _copy_module(value, memo)
    return copy.deepcopy(value, memo)


def _copy_dict(value: dict[Any, Any], memo: dict[int, Any]) -> dict[Any, Any]:
    """A dict or an OrderedDict (with no attributes of its own), entry by entry in order."""
    made: dict[Any, Any] = type(value)()
    memo[id(value)] = made
    for key, item in value.items():
        made[_copy(key, memo)] = _copy(item, memo)
    _keep_alive(value, memo)
    return made


def _copy_module(module: nn.Module, memo: dict[int, Any]) -> nn.Module:
    """What `copy.deepcopy` makes of a module: `__new__`, registered, state copied (what
    nn.Module's `__getstate__` gives), `__setstate__`."""
    kind = type(module)
    made = kind.__new__(kind)
    memo[id(module)] = made
    state = {name: _copy(item, memo) for name, item in module.__dict__.items()
             if name != "_compiled_call_impl"}  # as nn.Module.__getstate__ leaves it out
    cast(Any, made).__setstate__(state)
    _keep_alive(module, memo)
    return made


def _keep_alive(value: Any, memo: dict[int, Any]) -> None:
    """As `copy.deepcopy` does: the originals held by the memo, so that none of their ids is
    taken by another object while the memo is in use."""
    memo.setdefault(id(memo), []).append(value)


# What a module class copied here has none of, and what it has as its base classes define it.
_ABSENT = ("__deepcopy__", "__getnewargs_ex__", "__getnewargs__")
_INHERITED: tuple[tuple[str, Any], ...] = (
    ("__reduce_ex__", object.__reduce_ex__), ("__reduce__", object.__reduce__),
    ("__getstate__", nn.Module.__getstate__), ("__new__", object.__new__))


# The names `copy.deepcopy` (and the pickle protocol it uses) looks up on the instance itself.
_LOOKED_UP = frozenset({*_ABSENT, *(name for name, _ in _INHERITED)})


def _plain_instance(module: nn.Module) -> bool:
    """Whether none of those names is the module's own (an attribute set on it, or a child,
    parameter or buffer so named, which nn.Module's `__getattr__` would hand deepcopy)."""
    return all(_LOOKED_UP.isdisjoint(names) for names in (
        module.__dict__, module._parameters, module._buffers, module._modules))


def _plain_module(kind: type) -> bool:
    """Whether a module class copies as nn.Module's own state protocol does. Asked of the class
    each time (a microsecond), not cached: a class may be changed between two builds."""
    return (kind not in copyreg.dispatch_table
            and all(getattr(kind, name, None) is None for name in _ABSENT)
            and all(getattr(kind, name, None) is default for name, default in _INHERITED)
            and not copyreg._slotnames(kind))  # type: ignore[attr-defined]


__all__ = ["deep_copy"]
