"""How a tensor a hook is handed becomes a record: its values copied out at once (or, above the
value limit, a summary), and the seed gradients the spec's calls start from. Torch in, plain
values out; the tracer and every check use these.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import nn

from gradexplain.capture.build import make_tensor
from gradexplain.capture.remembered import remembered
from gradexplain.errors import ComplexValueError, TransformedValueError
from gradexplain.language.model import GradOutputs
from gradexplain.records.trace import VALUE_LIMIT, Summary, TensorValue

# Above this many elements a tensor is recorded as a summary the moment a hook sees it: copying
# every value of every activation of a deep model costs more time than the whole forward and
# backward. `--max-values` lowers it (DESIGN section 5 allows a summary above 10,000).
_value_limit: ContextVar[int] = ContextVar("gradexplain_value_limit", default=VALUE_LIMIT)


@contextmanager
def value_limit(limit: int | None) -> Iterator[None]:
    """Within the block, tensors above `limit` elements are summarised (None: the default)."""
    token = _value_limit.set(VALUE_LIMIT if limit is None else min(limit, VALUE_LIMIT))
    try:
        yield
    finally:
        _value_limit.reset(token)


def tensor_value(tensor: torch.Tensor | None) -> TensorValue | None:
    """A tensor's values copied out now, in full precision, or a summary for a large one
    (computed once per distinct values within `remembering()`, and once for a tensor and its
    transposes on the same memory)."""
    if tensor is None:
        return None
    if _transformed(tensor):
        _refuse_transformed(tensor)
    limit = _value_limit.get()
    local = local_part(tensor)
    if local.numel() > limit and local.layout == torch.strided:
        # Remembered by its values in memory order: a Linear's weight gradient is handed to
        # hooks as the transpose of its `.grad`, on the same memory (see `_Summarised`).
        ordered = _in_memory_order(local)
        return remembered(ordered, "summary", _Summarised, alike=True).record(local, ordered)
    return remembered(local, ("value", limit), lambda item: _recorded(item, limit),
                      alike=True)


def local_part(tensor: torch.Tensor) -> torch.Tensor:
    """What this process holds of a tensor: a DTensor's local shard (FSDP2's parameters and
    their `.grad` are DTensors, sharded across ranks), any other tensor itself."""
    if type(tensor) is torch.Tensor:
        return tensor
    to_local = getattr(tensor, "to_local", None)
    if to_local is None:
        return tensor
    with torch.no_grad():
        local: torch.Tensor = to_local()
    return local


def _recorded(tensor: torch.Tensor, limit: int) -> TensorValue:
    data = tensor.detach()
    if data.layout != torch.strided:
        # A sparse gradient (Embedding(sparse=True)) has no storage to read: its values are
        # those of the dense tensor it stands for, which is what every check compares.
        data = data.to_dense()
    if data.numel() > limit:
        return TensorValue(tuple(data.shape), dtype_name(data), None, _summary(data))
    _refuse_complex(data)
    return TensorValue(tuple(data.shape), dtype_name(data), data.tolist())


def dtype_name(tensor: torch.Tensor) -> str:
    """A tensor's dtype as records and messages name it: `float32`, `bfloat16`, `int64`."""
    return str(tensor.dtype).removeprefix("torch.")


def _refuse_complex(data: torch.Tensor) -> None:
    if data.is_complex():
        # The model's output too: the root's forward hook records it before the loss is taken.
        raise ComplexValueError(
            f"a hook was handed a complex tensor ({data.dtype}, shape {tuple(data.shape)}): "
            "gradexplain labels real-valued gradients only (torch's gradient of a complex "
            "tensor is a conjugate Wirtinger derivative, which no label here says): keep "
            "complex arithmetic out of the model explained, or explain a real-valued part of it")


# Whether a tensor is one of functorch's wrappers (torch.func.vmap, grad, jvp): they hold no
# values of their own (reading their memory fails) and, under vmap, stand for one per sample.
_transformed: Callable[[torch.Tensor], bool] = getattr(
    torch._C._functorch, "is_functorch_wrapped_tensor", lambda tensor: False)


def _refuse_transformed(tensor: torch.Tensor) -> None:
    raise TransformedValueError(
        f"a hook was handed a tensor inside a torch.func transform (vmap, grad or jvp; shape "
        f"{tuple(tensor.shape)}): a wrapper of functorch's, whose values gradexplain does not "
        "read (under vmap it stands for one value per sample): call the modules inside the "
        "transform outside it (a function of plain tensor operations inside is fine), or "
        "explain a part of the model without the transform")


def _summary(data: torch.Tensor) -> Summary:
    """The least, greatest, mean and norm of a tensor's values, in float64."""
    _refuse_complex(data)
    as_float = data.double()
    least, greatest = _least_greatest(data, as_float)
    return Summary(least, greatest, as_float.mean().item(),
                   torch.linalg.vector_norm(as_float).item())


class _Summarised:
    """The summary of a tensor's values read in the order they lie in memory, and the record
    made of it for each layout it is handed out for (one record object per layout: a check of
    a record against an expected tensor is remembered by the record's id).

    One summary serves a tensor and its transposes on the same memory: a Linear's weight
    gradient comes to hooks as a transpose and then as `.grad`, and summarising it twice cost a
    copy and a summary of each weight. Its mean and norm are computed on the values in memory
    order, which is how torch reduces a transposed tensor too (a reduction's dimensions are
    ordered by their strides): the same numbers as in the tensor's own layout, bit for bit on
    torch 2.13. So are its least and greatest, unless a zero or a nan comes out: which one then
    depends on the order they are read in, and the summary is computed again in the layout
    (as `_least_greatest` does)."""

    __slots__ = ("in_order", "other_layouts", "summary")

    def __init__(self, ordered: torch.Tensor) -> None:
        self.summary = _summary(ordered.detach())
        # The record of a tensor in memory order itself (every such tensor handed this
        # summary has the one layout its memory order has), and of each other layout.
        self.in_order: TensorValue | None = None
        self.other_layouts: dict[tuple[torch.Size, tuple[int, ...]], TensorValue] = {}

    def record(self, tensor: torch.Tensor, ordered: torch.Tensor) -> TensorValue:
        """The record of `tensor`, whose values in memory order are `ordered`."""
        if tensor is ordered:
            if self.in_order is None:
                self.in_order = TensorValue(tuple(tensor.shape), dtype_name(tensor), None,
                                            self.summary)
            return self.in_order
        layout = (tensor.shape, tensor.stride())
        found = self.other_layouts.get(layout)
        if found is None:
            summary = self.summary
            if not _unambiguous(summary.min, summary.max):
                summary = _summary(tensor.detach())
            found = self.other_layouts[layout] = TensorValue(
                tuple(tensor.shape), dtype_name(tensor), None, summary)
        return found


# The float dtypes narrower than float64, each of whose values converts to float64 exactly.
_NARROWER = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _least_greatest(data: torch.Tensor, as_float: torch.Tensor) -> tuple[float, float]:
    """`extremes(as_float)`, `as_float` being `data` in float64, read from `data` itself where
    it is a narrower float: half the bytes or fewer, and the same numbers, since the least and
    greatest values are the same values in either dtype. Unless a zero or a nan comes out:
    which zero or which nan is then the float64 copy's in the layout, as before (read in memory
    order, the copy would come out ambiguous too: the same numbers)."""
    if data.dtype in _NARROWER:
        low, high = torch.aminmax(_in_memory_order(data))
        least, greatest = low.item(), high.item()
        if _unambiguous(least, greatest):
            return least, greatest
        low, high = torch.aminmax(as_float)
    else:
        low, high = extremes(as_float)
    return low.item(), high.item()


def extremes(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.aminmax(values)`, read in memory order where the layout is another order of it
    (a Linear's weight gradient is a transpose): torch reduces a transposed tensor several times
    slower. The least and greatest of a set of numbers do not depend on the order they are read
    in, except which of two zeros (0.0, -0.0) or which nan comes out: then, as torch gives them
    in the layout."""
    flat = _in_memory_order(values)
    if flat is not values:
        low, high = torch.aminmax(flat)
        if _unambiguous(low.item(), high.item()):
            return low, high
    return torch.aminmax(values)


def _in_memory_order(values: torch.Tensor) -> torch.Tensor:
    """The tensor's dimensions permuted into the order its values lie in memory, where that
    makes it contiguous (a transpose); else the tensor itself."""
    if values.is_contiguous():
        return values
    if values.dim() == 2:
        flat = values.t()  # the same view as the permutation below: faster, and most common
    else:
        strides = values.stride()
        flat = values.permute(sorted(range(values.dim()), key=lambda dim: -strides[dim]))
    return flat if flat.is_contiguous() else values


def _unambiguous(least: float, greatest: float) -> bool:
    """Whether a least and a greatest value are the same whatever order the values are read
    in: neither is a zero (0.0 and -0.0 compare equal, and which comes out depends on the
    order) nor a nan (which nan comes out, too)."""
    return least != 0 and greatest != 0 and not math.isnan(least) and not math.isnan(greatest)


def in_float64(value: TensorValue | None) -> TensorValue | None:
    """The record of a floating tensor converted to float64: the same numbers (every float
    dtype converts to float64 exactly, and a summary is computed in float64 either way)."""
    if value is None or value.dtype == "float64":
        return value
    return TensorValue(value.shape, "float64", value.value, value.summary)


def still_stored(tensor: torch.Tensor) -> bool:
    """Whether a tensor's values can still be read: FSDP2 frees the storage of the parameters
    it gathered once the forward is done (resizes it to nothing), a model may do the same to a
    tensor of its own, and reading such a tensor would read freed memory."""
    if tensor.numel() == 0 or tensor.layout != torch.strided or (
            type(tensor) is not torch.Tensor and not isinstance(tensor, nn.Parameter)):
        return True  # no storage of its own to have freed (sparse, a subclass: read as before)
    try:
        stored = tensor.untyped_storage().nbytes()
    except RuntimeError:
        return True
    needed = (tensor.storage_offset() + 1 + sum(
        (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True)))
    return stored >= needed * tensor.element_size()


def recorded_tensor(value: TensorValue) -> torch.Tensor:
    """A recorded value as a float64 tensor of its recorded shape. The nested lists alone lose
    an empty tensor's shape: `[]` is (0,), whether it was recorded from (0,) or (0, 2)."""
    assert value.value is not None, "a summarised value has no elements to rebuild"
    rebuilt = torch.tensor(value.value, dtype=torch.float64)
    shape = tuple(value.shape)
    return rebuilt.reshape(shape) if rebuilt.numel() == math.prod(shape) else rebuilt


def grad_outputs(spec: GradOutputs, of: torch.Tensor) -> torch.Tensor:
    """The `grad_outputs` tensor of an autograd.grad call: ones, a one-hot column, a literal."""
    if spec.kind == "ones":
        return torch.ones_like(of)
    if spec.kind == "one_hot":
        seed = torch.zeros_like(of)
        seed[..., spec.column] = 1.0
        return seed
    assert spec.value is not None
    return make_tensor(spec.value).to(of.dtype)


__all__ = ["dtype_name", "grad_outputs", "in_float64", "recorded_tensor", "still_stored",
           "tensor_value", "value_limit"]
