"""Shape algebra in plain Python: what each operation makes of its operands' shapes.

`validate` must not import torch, yet must say "Linear expects 3 input features, got 2" before
anything runs. These rules follow torch's documented semantics for the operations the step
language has (broadcasting, matmul, reductions, convolution and pooling sizes, basic indexing).
A rule that cannot fit raises ShapeProblem with a plain sentence; the checker adds the location.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradexplain.language.expr import Ellipsis_, IndexItem, NewAxis, Slice

Shape = tuple[int, ...]


class ShapeProblem(Exception):
    """An operation whose operands do not fit; the message says how, the checker says where."""


@dataclass(frozen=True)
class TensorType:
    shape: Shape
    floating: bool = True
    requires_grad: bool = False

    def with_shape(self, shape: Shape) -> TensorType:
        return TensorType(shape, self.floating, self.requires_grad)


@dataclass(frozen=True)
class NumberType:
    """A Python number in a step (`x * 3`): it stays a Python scalar, as in the articles."""

    value: float | int | bool


@dataclass(frozen=True)
class TupleType:
    """Several tensors returned together (`chunk`, a module with several `returns`)."""

    items: tuple[TensorType, ...]


@dataclass(frozen=True)
class UnknownType:
    """The type of anything inside a module the forward never calls: accepted, not checked."""


ValueType = TensorType | NumberType | TupleType | UnknownType


def show(shape: Shape) -> str:
    return "[" + ", ".join(str(size) for size in shape) + "]"


def numel(shape: Shape) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def broadcast(left: Shape, right: Shape) -> Shape:
    """torch's broadcasting: align from the right; sizes must be equal or 1."""
    result: list[int] = []
    for i in range(1, max(len(left), len(right)) + 1):
        a = left[-i] if i <= len(left) else 1
        b = right[-i] if i <= len(right) else 1
        if a != b and a != 1 and b != 1:
            raise ShapeProblem(
                f"shapes {show(left)} and {show(right)} do not broadcast "
                f"(size {a} against {b} in dimension {-i})"
            )
        result.append(max(a, b) if a != 0 and b != 0 else 0)
    return tuple(reversed(result))


def matmul(left: Shape, right: Shape) -> Shape:
    """torch.matmul's rules for 1-D, 2-D and batched operands."""
    if not left or not right:
        raise ShapeProblem(
            f"@ needs tensors with at least one dimension, got {show(left)} and {show(right)}"
        )
    inner_left = left[-1]
    inner_right = right[0] if len(right) == 1 else right[-2]
    if inner_left != inner_right:
        raise ShapeProblem(
            f"@ cannot multiply {show(left)} by {show(right)}: the inner sizes "
            f"{inner_left} and {inner_right} must be equal"
        )
    if len(left) == 1 and len(right) == 1:
        return ()
    if len(left) == 2 and len(right) == 1:
        return (left[0],)
    if len(left) == 1 and len(right) == 2:
        return (right[1],)
    if len(left) == 2 and len(right) == 2:
        return (left[0], right[1])
    left_batch = left[:-2] if len(left) > 1 else ()
    right_batch = right[:-2] if len(right) > 1 else ()
    batch = broadcast(left_batch, right_batch)
    rows = (left[-2],) if len(left) > 1 else ()
    cols = (right[-1],) if len(right) > 1 else ()
    return batch + rows + cols


def normalize_dim(dim: int, ndim: int, what: str = "dim") -> int:
    """A dimension index in range, negatives counted from the end (0-d tensors accept 0 and -1)."""
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise ShapeProblem(
            f"{what}={dim} is out of range for a tensor with {ndim} dimension(s) "
            f"(expected {-bound} to {bound - 1})"
        )
    return dim % bound


def reduce(shape: Shape, dim: int | None, keepdim: bool) -> Shape:
    if dim is None:
        return tuple(1 for _ in shape) if keepdim else ()
    axis = normalize_dim(dim, len(shape))
    if not shape:
        return ()
    if keepdim:
        return shape[:axis] + (1,) + shape[axis + 1 :]
    return shape[:axis] + shape[axis + 1 :]


def reshape(shape: Shape, target: tuple[int, ...]) -> Shape:
    total = numel(shape)
    unknown = [i for i, size in enumerate(target) if size == -1]
    if len(unknown) > 1 or any(size < -1 for size in target):
        raise ShapeProblem(f"reshape to {show(target)}: only one size may be -1, none below it")
    known = numel(tuple(size for size in target if size != -1))
    if unknown:
        if known == 0 or total % known:
            raise ShapeProblem(f"cannot reshape {show(shape)} ({total} elements) to {show(target)}")
        return tuple(total // known if size == -1 else size for size in target)
    if known != total:
        raise ShapeProblem(f"cannot reshape {show(shape)} ({total} elements) to {show(target)}")
    return target


def flatten(shape: Shape, start_dim: int, end_dim: int) -> Shape:
    start = normalize_dim(start_dim, len(shape), "start_dim")
    end = normalize_dim(end_dim, len(shape), "end_dim")
    if not shape:
        return (1,)
    if start > end:
        raise ShapeProblem(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return shape[:start] + (numel(shape[start : end + 1]),) + shape[end + 1 :]


def transpose(shape: Shape, dim0: int, dim1: int) -> Shape:
    a = normalize_dim(dim0, len(shape), "dim0")
    b = normalize_dim(dim1, len(shape), "dim1")
    if not shape:
        return ()
    result = list(shape)
    result[a], result[b] = result[b], result[a]
    return tuple(result)


def squeeze(shape: Shape, dim: int | None) -> Shape:
    if dim is None:
        return tuple(size for size in shape if size != 1)
    axis = normalize_dim(dim, len(shape))
    if not shape:
        return ()
    return shape[:axis] + shape[axis + 1 :] if shape[axis] == 1 else shape


def unsqueeze(shape: Shape, dim: int) -> Shape:
    axis = normalize_dim(dim, len(shape) + 1)
    return shape[:axis] + (1,) + shape[axis:]


def chunk(shape: Shape, chunks: int, dim: int) -> tuple[Shape, ...]:
    if chunks < 1:
        raise ShapeProblem(f"chunk needs chunks >= 1, got {chunks}")
    if not shape:
        raise ShapeProblem("chunk needs a tensor with at least one dimension")
    axis = normalize_dim(dim, len(shape))
    size = shape[axis]
    step = -(-size // chunks) if size else 0
    pieces: list[Shape] = []
    start = 0
    while start < size:
        length = min(step, size - start)
        pieces.append(shape[:axis] + (length,) + shape[axis + 1 :])
        start += length
    # An empty dimension still splits into `chunks` pieces, all empty (torch.chunk does the same).
    return tuple(pieces) or tuple(shape for _ in range(chunks))


def window(size: int, kernel: int, stride: int, padding: int, dilation: int, what: str) -> int:
    """Output length of a convolution or pooling window along one dimension."""
    span = dilation * (kernel - 1) + 1
    out = (size + 2 * padding - span) // stride + 1
    if out < 1:
        raise ShapeProblem(
            f"{what}: an input of size {size} (padding {padding}) is smaller than the window "
            f"of size {span}"
        )
    return out


def index(shape: Shape, items: tuple[IndexItem, ...]) -> Shape:
    """Basic indexing: whole numbers drop a dimension, slices keep it, None adds one."""
    consumed = sum(1 for item in items if isinstance(item, int | Slice))
    if sum(1 for item in items if isinstance(item, Ellipsis_)) > 1:
        raise ShapeProblem("an index may hold at most one ...")
    if consumed > len(shape):
        raise ShapeProblem(
            f"too many indices ({consumed}) for a tensor of shape {show(shape)}"
        )
    expanded: list[IndexItem] = []
    for item in items:
        if isinstance(item, Ellipsis_):
            expanded += [Slice(None, None, None)] * (len(shape) - consumed)
        else:
            expanded.append(item)
    result: list[int] = []
    dim = 0
    for item in expanded:
        if isinstance(item, NewAxis):
            result.append(1)
            continue
        size = shape[dim]
        if isinstance(item, int):
            if not -size <= item < size:
                raise ShapeProblem(
                    f"index {item} is out of range for dimension {dim} of size {size}"
                )
        else:
            assert isinstance(item, Slice)
            if item.step is not None and item.step <= 0:
                raise ShapeProblem("slice steps must be positive")
            result.append(len(range(size)[item.start : item.stop : item.step]))
        dim += 1
    return tuple(result) + shape[dim:]
