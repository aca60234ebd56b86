"""Hypothesis strategies for the shape-rule tests (tests/language/test_shapes_*.py): shapes and
dimension indices, shapes that broadcast with a given one, reshape targets, index items, and
Conv2d and MaxPool2d arguments with an input shape; and the hypothesis settings those tests use.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gradexplain.language import shapes
from gradexplain.language.expr import Ellipsis_, NewAxis, Slice
from gradexplain.language.shapes import Shape

FEW = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MORE = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


sizes = st.integers(0, 5)
shapes_st = st.lists(sizes, max_size=4).map(tuple)
dims = st.integers(-5, 5)


def dim_of(shape: Shape) -> st.SearchStrategy[int]:
    """A dimension index for `shape`: usually in range, sometimes anything from -5 to 5."""
    bound = max(len(shape), 1)
    return st.integers(-bound, bound - 1) | dims


@st.composite
def shape_and_dims(draw: st.DrawFn, count: int,
                   shape_strategy: st.SearchStrategy[Shape] = shapes_st) -> tuple[Shape, ...]:
    """A shape followed by `count` dimension indices for it."""
    shape = draw(shape_strategy)
    return (shape, *(draw(dim_of(shape)) for _ in range(count)))  # type: ignore[arg-type]


@st.composite
def related_shape(draw: st.DrawFn, base: Shape, max_rank: int = 4) -> Shape:
    """A shape aligned from the right with `base`: each size equal to base's, 1, or anything."""
    rank = draw(st.integers(0, max_rank))
    result: list[int] = []
    for i in range(1, rank + 1):
        choices = [st.just(1), sizes]
        if i <= len(base):
            choices.insert(0, st.just(base[-i]))
        result.append(draw(st.one_of(*choices)))
    return tuple(reversed(result))


@st.composite
def reshape_target(draw: st.DrawFn, shape: Shape) -> tuple[int, ...]:
    """Mostly targets with the right number of elements, so both outcomes are common."""
    kind = draw(st.sampled_from(["random", "permuted", "total", "ones"]))
    if kind == "random":
        return tuple(draw(st.lists(st.integers(-2, 6), max_size=4)))
    if kind == "total":
        return (draw(st.sampled_from([shapes.numel(shape), -1])),)
    target = list(draw(st.permutations(shape)))
    if kind == "ones":
        target.insert(draw(st.integers(0, len(target))), 1)
    for _ in range(draw(st.integers(0, 2))):  # replace one or two sizes with -1
        if target:
            target[draw(st.integers(0, len(target) - 1))] = -1
    return tuple(target)


def _bound() -> st.SearchStrategy[int | None]:
    return st.none() | st.integers(-7, 7)


index_items = st.one_of(
    st.integers(-6, 6),
    st.builds(Slice, _bound(), _bound(), st.none() | st.integers(-1, 3)),
    st.just(NewAxis()),
    st.just(Ellipsis_()),
)


def pair_of(low: int, high: int) -> st.SearchStrategy[int | tuple[int, int]]:
    return st.integers(low, high) | st.tuples(st.integers(low, high), st.integers(low, high))


@st.composite
def spatial_shape(draw: st.DrawFn, channels: int) -> Shape:
    rank = draw(st.sampled_from([2, 3, 3, 3, 4, 4, 4, 5]))
    shape = list(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    if rank >= 3 and draw(st.integers(0, 5)):
        shape[-3] = channels
    if shape and not draw(st.integers(0, 3)):  # an empty batch, channel or image dimension
        shape[draw(st.integers(0, rank - 1))] = 0
    return tuple(shape)


@st.composite
def conv2d_case(draw: st.DrawFn) -> tuple[dict[str, Any], Shape]:
    kwargs: dict[str, Any] = {"in_channels": draw(st.integers(1, 4)),
                              "out_channels": draw(st.integers(1, 4)),
                              "kernel_size": draw(pair_of(1, 3))}
    optional = {"stride": pair_of(1, 3), "padding": pair_of(1, 2) | pair_of(0, 2),
                "dilation": pair_of(1, 2), "groups": st.sampled_from([1, 2, 3]),
                "bias": st.booleans()}
    for key, strategy in optional.items():
        if draw(st.booleans()):
            kwargs[key] = draw(strategy)
    return kwargs, draw(spatial_shape(kwargs["in_channels"]))


@st.composite
def maxpool2d_case(draw: st.DrawFn) -> tuple[dict[str, Any], Shape]:
    kwargs: dict[str, Any] = {"kernel_size": draw(pair_of(1, 4))}
    optional = {"stride": pair_of(1, 3), "padding": pair_of(0, 1) | pair_of(0, 2),
                "dilation": pair_of(1, 2)}
    for key, strategy in optional.items():
        if draw(st.booleans()):
            kwargs[key] = draw(strategy)
    return kwargs, draw(spatial_shape(draw(st.integers(1, 3) | st.integers(0, 3))))
