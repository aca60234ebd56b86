"""The pure-Python shape functions against torch itself: torch is the oracle, never a hard-coded
answer.

Each function of `gradexplain.language.shapes` (broadcast, matmul, reductions, reshape, flatten,
transpose, squeeze, unsqueeze, chunk, indexing) gets generated shapes and arguments, and the same
operation runs on `torch.empty(shape)`: when torch accepts, our rule must give exactly torch's
shape; when torch raises, our rule must raise ShapeProblem (tests/helpers/shapeoracle.py).

Where the step language is deliberately stricter than torch (more than one `...` in an index,
whose torch meaning is a quirk), the tests assert the refusal instead of comparing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from hypothesis import given
from hypothesis import strategies as st

from gradexplain.language import shapes
from gradexplain.language.expr import Ellipsis_, IndexItem
from gradexplain.language.shapes import Shape
from tests.helpers.shapedraws import (
    FEW,
    SOME,
    index_items,
    related_shape,
    reshape_target,
    shape_and_dims,
    shapes_st,
    sizes,
)
from tests.helpers.shapeoracle import empty, our_outcome, same, torch_item, torch_outcome


@st.composite
def shape_pair(draw: st.DrawFn) -> tuple[Shape, Shape]:
    left = draw(shapes_st)
    return left, draw(related_shape(left))


@FEW
@given(shape_pair())
def test_broadcast_matches_torch(pair: tuple[Shape, Shape]) -> None:
    left, right = pair
    same(our_outcome(lambda: shapes.broadcast(left, right)),
         torch_outcome(lambda: empty(left) + empty(right)), f"broadcast {left} {right}")


@st.composite
def matmul_pair(draw: st.DrawFn) -> tuple[Shape, Shape]:
    left = draw(shapes_st)
    rank = draw(st.integers(0, 4))
    right = list(draw(st.lists(sizes, min_size=rank, max_size=rank)))
    if left and right and draw(st.booleans()):
        right[0 if rank == 1 else -2] = left[-1]  # make the inner sizes agree
    if rank > 2 and len(left) > 2 and draw(st.booleans()):
        left_batch, right_batch = left[:-2], rank - 2
        for i in range(1, min(len(left_batch), right_batch) + 1):
            right[-2 - i] = draw(st.sampled_from([left_batch[-i], 1]))
    return left, tuple(right)


@SOME
@given(matmul_pair())
def test_matmul_matches_torch(pair: tuple[Shape, Shape]) -> None:
    left, right = pair
    same(our_outcome(lambda: shapes.matmul(left, right)),
         torch_outcome(lambda: empty(left) @ empty(right)), f"matmul {left} {right}")


@FEW
@given(shape_and_dims(1), st.booleans(), st.booleans(),
       st.sampled_from([torch.sum, torch.mean]))
def test_reduce_matches_torch(case: tuple[Any, ...], all_dims: bool, keepdim: bool,
                              function: Callable[..., torch.Tensor]) -> None:
    shape, dim = case[0], None if all_dims else case[1]
    same(our_outcome(lambda: shapes.reduce(shape, dim, keepdim)),
         torch_outcome(lambda: function(empty(shape), dim=dim, keepdim=keepdim)),
         f"{function.__name__}{shape} dim={dim} keepdim={keepdim}")


@SOME
@given(st.data())
def test_reshape_matches_torch(data: st.DataObject) -> None:
    shape = data.draw(shapes_st)
    target = data.draw(reshape_target(shape))
    same(our_outcome(lambda: shapes.reshape(shape, target)),
         torch_outcome(lambda: torch.reshape(empty(shape), target)), f"reshape {shape} {target}")


@FEW
@given(shape_and_dims(2))
def test_flatten_matches_torch(case: tuple[Any, ...]) -> None:
    shape, start, end = case
    same(our_outcome(lambda: shapes.flatten(shape, start, end)),
         torch_outcome(lambda: torch.flatten(empty(shape), start, end)),
         f"flatten{shape} {start} {end}")


@FEW
@given(shape_and_dims(2))
def test_transpose_matches_torch(case: tuple[Any, ...]) -> None:
    shape, dim0, dim1 = case
    same(our_outcome(lambda: shapes.transpose(shape, dim0, dim1)),
         torch_outcome(lambda: torch.transpose(empty(shape), dim0, dim1)),
         f"transpose{shape} {dim0} {dim1}")


@FEW
@given(shape_and_dims(1, st.lists(st.sampled_from([0, 1, 1, 2, 3]), max_size=4).map(tuple)),
       st.booleans())
def test_squeeze_matches_torch(case: tuple[Any, ...], all_dims: bool) -> None:
    shape, dim = case[0], None if all_dims else case[1]
    tensor = empty(shape)
    same(our_outcome(lambda: shapes.squeeze(shape, dim)),
         torch_outcome(lambda: tensor.squeeze() if dim is None else tensor.squeeze(dim)),
         f"squeeze{shape} dim={dim}")


@FEW
@given(shapes_st, st.integers(-6, 6))
def test_unsqueeze_matches_torch(shape: Shape, dim: int) -> None:
    same(our_outcome(lambda: shapes.unsqueeze(shape, dim)),
         torch_outcome(lambda: torch.unsqueeze(empty(shape), dim)), f"unsqueeze{shape} {dim}")


@SOME
@given(shape_and_dims(1, st.lists(st.integers(0, 7), max_size=3).map(tuple)),
       st.integers(-1, 5))
def test_chunk_matches_torch(case: tuple[Any, ...], chunks: int) -> None:
    shape, dim = case
    same(our_outcome(lambda: shapes.chunk(shape, chunks, dim)),
         torch_outcome(lambda: torch.chunk(empty(shape), chunks, dim)),
         f"chunk{shape} chunks={chunks} dim={dim}")


@SOME
@given(shapes_st, st.lists(index_items, min_size=1, max_size=5).map(tuple))
def test_index_matches_torch(shape: Shape, items: tuple[IndexItem, ...]) -> None:
    ours = our_outcome(lambda: shapes.index(shape, items))
    if sum(isinstance(item, Ellipsis_) for item in items) > 1:
        # torch lets every `...` skip the same number of dimensions (x[..., 0, ...] is legal and
        # x[..., 0, ..., 1] reports a "dimension 3 with size 0"); the step language refuses it.
        assert ours is None, f"index {shape}{items}: more than one ... must be refused"
        return
    same(ours, torch_outcome(lambda: empty(shape)[tuple(torch_item(item) for item in items)]),
         f"index {shape}{items}")

