"""What was computed from a tensor's values, remembered for the next time the same values come:
the one memo of the capture, for recorded values (`values.tensor_value`) and a check's expected
statistics (`checks.check`).

A deep model's hooks hand the same tensor to several hooks (a gradient goes to a node's
post-hook, the next node's pre-hook, a module's backward hook and a tensor hook), and thousands of
checks compare against a few hundred distinct tensors; each summary costs several small torch
calls, which cost more than their arithmetic. So within a `remembering()` block each result is
computed once per distinct tensor state.

A remembered result is only handed out for the same values, and the key alone is not trusted
for that. The key (the address of its first value, shape, strides, dtype, version counter) finds
a candidate: a tensor read at the same place in the same layout, not changed in place since as
torch counts changes (so a summary's reductions run in the same order on the same memory). But
writes through `.data` or a numpy view leave the version counter as it was, and a freed tensor's
address can be reused by another; so a candidate is taken only if the tensor equals, bit for
bit, the copy kept when the result was computed. Otherwise the result is computed again.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, cast

import torch

T = TypeVar("T")

# The dtypes remembered: those whose bytes are their values (not complex, not quantized).
_PLAIN = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
                    torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool})

Entry = tuple[torch.Tensor, Any]  # the copy of the values, what was computed from them
_memo: ContextVar[dict[Hashable, Entry] | None] = ContextVar("gradexplain_memo", default=None)


@contextmanager
def remembering() -> Iterator[None]:
    """Within the block, `remembered` keeps what it computes (and a copy of each tensor it
    computed from, until the block ends)."""
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


def remembered(tensor: torch.Tensor, kind: Hashable, compute: Callable[[torch.Tensor], T]) -> T:
    """`compute(tensor)`, or what it returned for the same values before in this block. `kind`
    tells apart what different callers compute (and anything else the result depends on).
    Only a plain tensor whose values fill one block of CPU memory is remembered."""
    memo = _memo.get()
    if (memo is None or type(tensor) not in (torch.Tensor, torch.nn.Parameter)
            or tensor.layout != torch.strided or tensor.device.type != "cpu"
            or tensor.dtype not in _PLAIN or tensor.is_inference()
            or tensor.numel() == 0 or not _one_block(tensor)):
        return compute(tensor)
    key = (kind, tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype,
           tensor._version)
    entry = memo.get(key)
    if entry is not None and _bytes(tensor) == _bytes(entry[0]):
        return cast(T, entry[1])
    result = compute(tensor)
    memo[key] = (tensor.detach().clone(), result)
    return result


def _one_block(tensor: torch.Tensor) -> bool:
    """Whether the tensor's values fill the memory from its first one, each once, in some
    order of its dimensions: contiguous, or a transpose of it (a Linear's weight gradient)."""
    if tensor.is_contiguous():
        return True
    step = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride(), strict=True),
                               key=lambda pair: pair[1]):
        if size != 1:
            if stride != step:
                return False
            step *= size
    return True


def _bytes(tensor: torch.Tensor) -> bytes:
    """A one-block CPU tensor's values as they are in memory. Read directly, as one copy:
    torch.equal on the bits (the floats viewed as integers, so that -0.0 and 0.0 differ and a
    nan equals itself) costs more than half of what the memo saves."""
    return ctypes.string_at(tensor.data_ptr(), tensor.nbytes)
