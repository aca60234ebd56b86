"""One copy of a Python model's parameter and buffer values, shared by the builds of a capture
while no pass changes it: what `PythonSource.build` hands its deep copy (`copier`) as the memo,
so that the copy does not copy them again.

Every pass runs on its own deep copy of the user's model (two passes, the check run), and copying a
model's parameters is most of what a deep copy costs: 47 MB three times over for a ResNet-18, in
fresh memory; then its 60 batch-norm buffers, small as they are, took 3 of the 5 ms a build still
cost (`Tensor.__deepcopy__` is Python, about 50 microseconds a tensor). Yet a pass almost never
changes a parameter's values. So the first build copies them, as `Parameter.__deepcopy__` and
`Tensor.__deepcopy__` do, and later builds wrap the same copy in tensors of their own (each
parameter its own leaf, with its own `.grad` and hooks), after checking, bit for bit, that the copy
still holds the model's values. A pass that changed one (a forward writing through `.data`, a hook
stepping an optimizer, batch norm in training mode updating its running statistics) leaves the copy
different: the next build copies afresh. Passes run one after another, each done before the next
build is made.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gradexplain.capture.remembered import PLAIN_DTYPES, same_bits
from gradexplain.capture.values import still_stored


class ParameterPool:
    """The shared copies of one model's parameters and buffers, by the original tensor."""

    def __init__(self) -> None:
        self.copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def memo(self, model: nn.Module) -> dict[Any, Any]:
        """A `copy.deepcopy` memo giving each of the model's parameters a new parameter, and
        each of its buffers a new tensor, on the shared copy of its values (made now where
        there is none, or it no longer holds them). What `deepcopy` would copy otherwise than
        as one block of values is left to it (not in the memo): a parameter of a subclass, or
        whose values are not one plain block of CPU memory; a buffer that is not a plain leaf
        tensor alone in its memory (see `_poolable`)."""
        memo: dict[Any, Any] = {}
        parameters, buffers = list(model.parameters()), list(model.buffers())
        for original in parameters:
            if type(original) is not nn.Parameter or not _plain(original):
                continue
            memo[id(original)] = nn.Parameter(self.values(original), original.requires_grad)
        for buffer in _poolable(buffers, parameters):
            values = self.values(buffer)
            copied = values.new_empty([])  # as Tensor.__deepcopy__: a tensor of its own
            copied.set_(values.untyped_storage(), 0, buffer.shape, buffer.stride())
            if buffer.requires_grad:
                copied.requires_grad_()
            if buffer.__dict__:  # nn.Buffer's marks (`persistent`), each a plain value
                copied.__dict__ = dict(buffer.__dict__)
            memo[id(buffer)] = copied
            # Where deepcopy looks up a storage it copied (UntypedStorage.__deepcopy__): a
            # view of this buffer kept elsewhere in the model then shares the same copy, as it
            # shares the buffer's memory.
            memo.setdefault("torch", {})[buffer.untyped_storage()._cdata] = (
                values.untyped_storage())
        return memo

    def values(self, original: torch.Tensor) -> torch.Tensor:
        """The shared copy of a tensor's values, made afresh where there is none or it no
        longer holds the tensor's values, bit for bit."""
        held = self.copies.get(id(original))
        if (held is not None and held[0] is original and still_stored(held[1])
                and same_bits(held[1], original)):
            return held[1]
        values = original.detach().clone(memory_format=torch.preserve_format)
        self.copies[id(original)] = (original, values)
        return values


# The attribute values a buffer may have and be pooled: what deepcopy hands back as they are.
_PLAIN_VALUES = frozenset({bool, int, float, str, type(None)})


def _plain(tensor: torch.Tensor) -> bool:
    """Whether `same_bits` can compare the tensor with its copy: a strided CPU tensor whose
    values fill one block of memory, all of it still there (a pass's model may free a
    parameter's storage once used, as FSDP2 does with what it gathers, and the shared copy is
    that storage: comparing freed memory would crash)."""
    return (tensor.is_cpu and tensor.layout == torch.strided and not tensor.is_inference()
            and tensor.numel() > 0 and tensor.is_contiguous() and still_stored(tensor))


def _poolable(buffers: list[torch.Tensor], parameters: list[nn.Parameter]) -> list[torch.Tensor]:
    """The buffers that `Tensor.__deepcopy__` would copy as one plain block of values alone in
    its memory: a plain tensor (no subclass, no `.grad`, no attribute of its own but plain
    values, which a copy of its `__dict__` copies), a leaf (deepcopy refuses any other, and is
    left to say so), of a dtype whose bytes are its values, filling its whole storage, which no
    other parameter or buffer shares (deepcopy keeps tensors that share memory sharing it; left
    to it)."""
    owners: dict[int, int] = {}
    for tensor in (*parameters, *buffers):
        try:
            pointer = tensor.untyped_storage().data_ptr()
        except RuntimeError:
            continue  # a subclass with no storage of its own (a DTensor): nothing to share
        owners[pointer] = owners.get(pointer, 0) + 1
    return [
        buffer for buffer in buffers
        if type(buffer) is torch.Tensor and _plain(buffer) and buffer.is_leaf
        and buffer.grad is None and buffer.dtype in PLAIN_DTYPES
        and all(type(value) in _PLAIN_VALUES for value in buffer.__dict__.values())
        and not buffer.is_conj() and not buffer.is_neg() and buffer.storage_offset() == 0
        and buffer.untyped_storage().nbytes() == buffer.nbytes
        and owners.get(buffer.untyped_storage().data_ptr()) == 1
    ]


__all__ = ["ParameterPool"]
