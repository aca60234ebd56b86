"""One copy of a Python model's parameter values, shared by the builds of a capture while no pass
changes it: what `PythonSource.build` hands its deep copy (`copier`) as the memo, so that the
copy does not copy them again.

Every pass runs on its own deep copy of the user's model (two passes, the check run), and copying
a model's parameters is most of what a deep copy costs: 47 MB three times over for a ResNet-18,
in fresh memory. Yet a pass almost never changes a parameter's values. So the first build copies
them, as `Parameter.__deepcopy__` does, and later builds wrap the same copy in parameters of
their own (each its own leaf, with its own `.grad` and hooks), after checking, bit for bit, that
the copy still holds the model's values. A pass that changed one (a forward writing through
`.data`, a hook stepping an optimizer) leaves the copy different: the next build copies afresh.
Passes run one after another, each done before the next build is made.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gradexplain.capture.remembered import same_bits
from gradexplain.capture.values import still_stored


class ParameterPool:
    """The shared copies of one model's parameters, by the original parameter."""

    def __init__(self) -> None:
        self.copies: dict[int, tuple[nn.Parameter, torch.Tensor]] = {}

    def memo(self, model: nn.Module) -> dict[int, Any]:
        """A `copy.deepcopy` memo giving each of the model's parameters a new parameter on the
        shared copy of its values (made now where there is none, or it no longer holds them).
        A parameter of a subclass, or whose values are not one plain block of CPU memory, is
        left to `deepcopy` (not in the memo)."""
        memo: dict[int, Any] = {}
        for original in model.parameters():
            if type(original) is not nn.Parameter or not _plain(original):
                continue
            held = self.copies.get(id(original))
            if (held is None or held[0] is not original or not still_stored(held[1])
                    or not same_bits(held[1], original)):
                values = original.detach().clone(memory_format=torch.preserve_format)
                self.copies[id(original)] = (original, values)
            else:
                values = held[1]
            memo[id(original)] = nn.Parameter(values, original.requires_grad)
        return memo


def _plain(tensor: torch.Tensor) -> bool:
    """Whether `same_bits` can compare the tensor with its copy: a strided CPU tensor whose
    values fill one block of memory, all of it still there (a pass's model may free a
    parameter's storage once used, as FSDP2 does with what it gathers, and the shared copy is
    that storage: comparing freed memory would crash)."""
    return (tensor.is_cpu and tensor.layout == torch.strided and not tensor.is_inference()
            and tensor.numel() > 0 and tensor.is_contiguous() and still_stored(tensor))


__all__ = ["ParameterPool"]
