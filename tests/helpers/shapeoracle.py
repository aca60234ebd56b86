"""The oracle for the shape-rule tests (tests/language/test_shapes_*.py): torch itself.

Our rule and torch run the same operation: `same` asserts that both give the same shape, or both
refuse (torch by raising one of TORCH_ERRORS, our rule by raising ShapeProblem). Their strategies
are in tests/helpers/shapedraws.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import event

from gradexplain.language.expr import Ellipsis_, IndexItem, NewAxis, Slice
from gradexplain.language.shapes import Shape, ShapeProblem, TensorType

# Exceptions by which torch (or Python, for slices) refuses an operation.
TORCH_ERRORS = (RuntimeError, IndexError, ValueError, TypeError)


Outcome = Shape | tuple[Shape, ...] | None  # None: refused


def torch_outcome(run: Callable[[], Any]) -> Outcome:
    """The shape torch gives (a tuple of shapes for several tensors), or None if it raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = run()
        except TORCH_ERRORS:
            return None
    if isinstance(result, tuple | list):
        return tuple(tuple(item.shape) for item in result)
    return tuple(result.shape)


def our_outcome(run: Callable[[], Any]) -> Outcome:
    """The shape our rule gives, or None if it raises ShapeProblem (any other error propagates)."""
    try:
        result = run()
    except ShapeProblem:
        return None
    if isinstance(result, TensorType):
        return result.shape
    assert isinstance(result, tuple)
    return result


def same(ours: Outcome, theirs: Outcome, what: str) -> None:
    event("torch refuses" if theirs is None else "torch accepts")  # --hypothesis-show-statistics
    assert ours == theirs, f"{what}: ours {_say(ours)}, torch {_say(theirs)}"


def _say(outcome: Outcome) -> str:
    return "refuses" if outcome is None else f"gives {outcome}"


def empty(shape: Shape, floating: bool = True) -> torch.Tensor:
    return torch.empty(shape) if floating else torch.zeros(shape, dtype=torch.int64)


def torch_item(item: IndexItem) -> Any:
    if isinstance(item, Slice):
        return slice(item.start, item.stop, item.step)
    if isinstance(item, NewAxis):
        return None
    if isinstance(item, Ellipsis_):
        return Ellipsis
    return item


