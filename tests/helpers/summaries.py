"""A recorded summary against torch's own numbers for the same tensor (the oracle of the
summary tests): the tensor's shape; the least and greatest bit for bit, as torch.aminmax gives
them on the tensor's float64 copy in its own layout (the sign of a zero, the bits of a nan); and
the mean and norm within a float64 rounding of torch's on that copy (gradexplain computes them on
the values in memory order, which torch reduces in the same order on torch 2.13, but the order
of a reduction is torch's to change)."""

from __future__ import annotations

import math

import torch

from gradexplain.records.trace import TensorValue

# How far a float64 mean or norm may be from torch's, relative to the largest value (for the
# mean: a mean near zero of large values keeps their rounding) or to the norm itself: a sum read
# in another order differs by a few roundings of its terms, far less than this.
MEAN_NORM_RELATIVE = 1e-12


def _bits(number: float) -> int:
    return int(torch.tensor(number, dtype=torch.float64).view(torch.int64).item())


def _close(mine: float, torchs: float, scale: float) -> bool:
    if not math.isfinite(torchs):
        return mine == torchs or (math.isnan(mine) and math.isnan(torchs))
    return abs(mine - torchs) <= MEAN_NORM_RELATIVE * scale


def assert_summary_is_torchs(value: TensorValue | None, tensor: torch.Tensor) -> None:
    assert value is not None and value.summary is not None
    assert tuple(value.shape) == tuple(tensor.shape)
    summary = value.summary
    copy = tensor.double()
    low, high = torch.aminmax(copy)
    assert (_bits(summary.min), _bits(summary.max)) == (_bits(low.item()), _bits(high.item()))
    finite = copy[copy.isfinite()].abs()
    largest = float(finite.max()) if finite.numel() else 0.0
    mean, norm = copy.mean().item(), torch.linalg.vector_norm(copy).item()
    assert _close(summary.mean, mean, largest), (summary.mean, mean)
    assert _close(summary.norm, norm, abs(norm)), (summary.norm, norm)
