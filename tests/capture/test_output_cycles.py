"""A model whose output holds itself (a list appended to itself, a dict that is its own value)
or nests containers deeper than any model does: one clear error (exit 2), where taking the
output apart recursed until Python's limit and said "internal error". Torch itself runs such a
forward: the test runs it first."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.api import explain
from gradexplain.capture.outputs import OUTPUT_NESTING
from gradexplain.errors import ModelRunError


def cyclic_list(y: torch.Tensor) -> Any:
    held: list[Any] = [y]
    held.append(held)
    return held


def cyclic_dict(y: torch.Tensor) -> Any:
    held: dict[str, Any] = {"a": y}
    held["b"] = held
    return held


def cycle_below(y: torch.Tensor) -> Any:
    return (y, cyclic_list(y * 2))


def deep(y: torch.Tensor) -> Any:
    nested: Any = y
    for _ in range(3 * OUTPUT_NESTING):
        nested = [nested]
    return (y, nested)


class Returning(nn.Module):
    def __init__(self, shape: Any) -> None:
        super().__init__()
        self.l = nn.Linear(3, 3)
        self.shape = shape

    def forward(self, x: torch.Tensor) -> Any:
        return self.shape(self.l(x))


@pytest.mark.parametrize(("shape", "said"), [
    (cyclic_list, "holds itself"), (cyclic_dict, "holds itself"),
    (cycle_below, "holds itself"), (deep, f"more than {OUTPUT_NESTING} deep")])
def test_an_output_holding_itself_or_nested_too_deep_is_one_error(shape: Any, said: str) -> None:
    x = torch.randn(2, 3)
    Returning(shape)(x)  # torch runs it
    with pytest.raises(ModelRunError, match=said):
        explain(Returning(shape), x)
