"""Calls whose outputs are one tensor: a module that returns what it made in an earlier call (a
cache), or a tensor another module made. Torch wraps each call's output for its full hooks, so
that tensor has one wrapper per call, and each call's full hooks get what reached its own
wrapper: its share of the gradient, not another call's.

The oracle is plain torch: its own module hooks on a copy of the model give each call's
arguments, which gradexplain must have recorded call for call; and the shares differ in value
(each use is scaled by its own factor), so a label that names another call's share fails its
check instead of passing by coincidence. Every argument of a full hook is labelled.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from gradexplain.api import explain
from tests.helpers.pyoracle import assert_module_hooks_match, events, hook_calls, leaves


class Cache(nn.Module):
    """l(x) on its first call; that same tensor on every later call."""

    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(2, 2)
        self.kept: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kept is None:
            self.kept = self.l(x)
        return self.kept


class _WithCache(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = Cache()


class CachedTwice(_WithCache):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a: torch.Tensor = self.c(x)
        b: torch.Tensor = self.c(x)
        return b * 3 + a * 5


class CachedTwiceMultiplied(_WithCache):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a: torch.Tensor = self.c(x)
        b: torch.Tensor = self.c(x)
        return torch.tanh(a) * b


class CachedThrice(_WithCache):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a: torch.Tensor = self.c(x)
        b: torch.Tensor = self.c(x)
        c: torch.Tensor = self.c(x)
        return c * 7 + a * 2 + b * 3


class CachedAroundAnother(_WithCache):
    """Another module runs between the two calls, on the first one's output."""

    def __init__(self) -> None:
        super().__init__()
        self.d = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a: torch.Tensor = self.c(x)
        h: torch.Tensor = self.d(a)
        b: torch.Tensor = self.c(x)
        return h * 3 + b * 5


class Maker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(2, 2)
        self.made: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.made = self.l(x)
        return self.made


class Reader(nn.Module):
    """Returns the tensor another module made, as it is."""

    def __init__(self, maker: Maker) -> None:
        super().__init__()
        self.source = [maker]  # in a list: not a submodule of this one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        made = self.source[0].made
        assert made is not None
        return made


class TwoModulesOneTensor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.maker = Maker()
        self.reader = Reader(self.maker)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a: torch.Tensor = self.maker(x)
        b: torch.Tensor = self.reader(x)
        return a * 5 + b * 3


MODELS: list[Callable[[], nn.Module]] = [CachedTwice, CachedTwiceMultiplied, CachedThrice,
                                         CachedAroundAnother, TwoModulesOneTensor]


def _model(make: Callable[[], nn.Module]) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make()


@pytest.mark.parametrize("make", MODELS, ids=[make.__name__ for make in MODELS])
def test_each_call_gets_its_own_share_and_the_label_says_which(
        make: Callable[[], nn.Module]) -> None:
    model = _model(make)
    x = torch.tensor([[0.5, -1.0], [2.0, 0.25]])
    result = explain(copy.deepcopy(model), *leaves([x]))
    assert result.walk.checks(), "a walk with no checks proves nothing"
    assert result.failures() == []
    for mode in ("legacy", "full"):
        # A fresh copy each time: the cache must start empty, as it does in each pass.
        expected = hook_calls(copy.deepcopy(model), leaves([x]), mode,
                              lambda output: output.sum())
        assert_module_hooks_match(result.walk, mode, expected)
    for hook in ("full_backward_pre", "full_backward"):
        for item in events(result.walk, "full", hook):
            for arg in item.args:
                if arg.value is not None:
                    assert arg.meaning is not None, f"{hook} {item.target} {arg.name}"
