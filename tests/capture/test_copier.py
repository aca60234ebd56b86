"""`copier.deep_copy` makes what `copy.deepcopy` makes, for every family of model: the same
classes, attributes, values, hooks, shared objects and cycles, and nothing of the original's
but atoms. The oracle is `copy.deepcopy` itself, outlined the same way."""

from __future__ import annotations

import copy
import types
import weakref
from collections import OrderedDict
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations

from gradexplain.capture.copier import deep_copy

ATOMS = (type(None), bool, int, float, complex, str, bytes, type)
FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType)


def outline(value: Any, seen: dict[int, int]) -> Any:
    """The object graph under `value` as nested tuples: each object numbered where first met
    and named by its number after (so sharing and cycles show), tensors by their values,
    functions by themselves (copy.deepcopy keeps them)."""
    if isinstance(value, (*ATOMS, *FUNCTIONS)):
        return ("atom", value)
    if id(value) in seen:
        return ("seen", seen[id(value)])
    seen[id(value)] = len(seen)
    kind = type(value).__name__
    if isinstance(value, torch.Tensor):
        return (kind, tuple(value.shape), str(value.detach().tolist()), value.requires_grad)
    if isinstance(value, weakref.ref):
        target = value()
        return (kind, None if target is None else outline(target, seen))
    if isinstance(value, types.MethodType):
        return (kind, value.__func__, outline(value.__self__, seen))
    if isinstance(value, dict):
        return (kind, tuple((key, outline(item, seen)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return (kind, tuple(outline(item, seen) for item in value))
    if isinstance(value, set):
        return (kind, tuple(sorted(map(repr, value))))
    return (kind, outline(vars(value), seen))


def objects(value: Any, found: dict[int, Any]) -> dict[int, Any]:
    """Every object under `value` that is not an atom (nor a function), by id."""
    if isinstance(value, (*ATOMS, *FUNCTIONS)) or id(value) in found:
        return found
    found[id(value)] = value
    if isinstance(value, torch.Tensor):
        return found
    if isinstance(value, weakref.ref):
        items: Any = () if value() is None else (value(),)
    elif isinstance(value, types.MethodType):
        items = (value.__self__,)
    elif isinstance(value, dict):
        items = value.values()
    elif isinstance(value, (list, tuple, set)):
        items = value
    else:
        items = vars(value).values()
    for item in items:
        objects(item, found)
    return found


class Shared(nn.Module):
    """One child used twice, a tied weight, a list of tensors, a non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        self.again = self.block
        self.head = nn.Linear(3, 3)
        self.tail = nn.Linear(3, 3)
        self.tail.weight = self.head.weight
        self.scales = [torch.ones(3), torch.zeros(3)]
        self.register_buffer("offset", torch.arange(3.0), persistent=False)
        self.settings = {"depth": 2, "names": ("a", "b")}


class Cyclic(nn.Module):
    """A child that refers back to its parent, outside `_modules`."""

    def __init__(self) -> None:
        super().__init__()
        self.child = nn.Linear(2, 2)
        self.child.__dict__["owner"] = self


class HookedByMethod(nn.Module):
    """Module hooks that are a function and a bound method of the module."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.seen = 0
        self.linear.register_forward_hook(self.count)
        self.linear.register_full_backward_hook(lambda module, grad_in, grad_out: None)

    def count(self, module: nn.Module, inputs: Any, output: Any) -> None:
        self.seen += 1


class OwnDeepcopy(nn.Module):
    """A module with its own `__deepcopy__`: called, as copy.deepcopy calls it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def __deepcopy__(self, memo: dict[int, Any]) -> OwnDeepcopy:
        made = OwnDeepcopy()
        made.linear.weight.data.copy_(self.linear.weight.data * 2)
        made.linear.bias.data.copy_(self.linear.bias.data)
        return made


class OwnSetstate(nn.Linear):
    """A subclass with a `__setstate__` of its own: handed the copied state."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.restored = True


def families() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {
        "mlp": nn.Sequential(*(nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3))),
        "conv, batch norm": nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU()),
        "gru": nn.GRU(3, 4),
        "lstm in a sequential": nn.Sequential(nn.LSTM(3, 4)),
        "attention": nn.MultiheadAttention(4, 2),
        "transformer layer": nn.TransformerEncoderLayer(8, 2, 16),
        "embedding": nn.Embedding(5, 3),
        "weight norm": parametrizations.weight_norm(nn.Linear(3, 3)),
        "shared, tied, lists, buffers": Shared(),
        "cycle": Cyclic(),
        "hooks": HookedByMethod(),
        "own __deepcopy__": nn.Sequential(OwnDeepcopy(), nn.Tanh()),
        "own __setstate__": OwnSetstate(2, 2),
    }


@pytest.mark.parametrize("name", list(families()))
def test_deep_copy_makes_what_copy_deepcopy_makes(name: str) -> None:
    model = families()[name]
    expected = copy.deepcopy(model)
    made = deep_copy(model, {})
    assert outline(made, {}) == outline(expected, {})
    original = objects(model, {})
    # A tuple is immutable: copy.deepcopy hands back the original where its items are atoms.
    shared = [type(item).__name__ for key, item in objects(made, {}).items()
              if key in original and not isinstance(item, tuple)]
    assert shared == [], f"the copy holds the original's {shared}"


def test_the_memo_is_honoured_and_filled() -> None:
    """A parameter given in the memo is used as given (the pool's), and the memo maps each
    module copied to its copy, as copy.deepcopy's does."""
    model: Any = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    given = nn.Parameter(torch.full((2, 2), 7.0))
    memo: dict[int, Any] = {id(model[0].weight): given}
    made: Any = deep_copy(model, memo)
    assert made[0].weight is given
    assert made[1].weight is not model[1].weight
    assert torch.equal(made[1].weight, model[1].weight)
    assert memo[id(model[1])] is made[1]


def test_a_copied_model_computes_what_the_original_does() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 2))
    x = torch.randn(2, 1, 4, 4)
    made = deep_copy(model, {})
    torch.testing.assert_close(made(x), model(x))
    made(x).sum().backward()
    assert all(parameter.grad is None for parameter in model.parameters())
    assert all(parameter.grad is not None for parameter in made.parameters())


def test_own_deepcopy_and_setstate_are_called() -> None:
    original: Any = families()["own __deepcopy__"]
    made: Any = deep_copy(original, {})
    torch.testing.assert_close(made[0].linear.weight, original[0].linear.weight * 2)
    restored: Any = deep_copy(OwnSetstate(2, 2), {})
    assert restored.restored is True


def test_dicts_keep_their_type_and_order() -> None:
    model: Any = nn.Linear(2, 2)
    model.table = OrderedDict([("b", 1), ("a", 2)])
    made: Any = deep_copy(model, {})
    assert type(made.table) is OrderedDict and list(made.table) == ["b", "a"]
    assert made.table is not model.table


def test_an_instances_own_deepcopy_is_called_as_copy_deepcopy_calls_it() -> None:
    """copy.deepcopy looks `__deepcopy__` up on the instance too: one set on a module itself
    is called, by both."""
    replacement = nn.Linear(2, 2)
    model: Any = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    model[0].__deepcopy__ = lambda memo: replacement
    expected: Any = copy.deepcopy(model)
    made: Any = deep_copy(model, {})
    assert expected[0] is replacement
    assert made[0] is replacement
    assert made[1] is not model[1]
