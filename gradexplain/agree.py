"""How a value gradexplain recorded is compared with the one it must equal.

One rule for every check, so that no check can fail where another passes: entries that are inf
or nan on either side must agree exactly (log(0) is -inf, 0 * inf is nan: values like any other),
and the finite rest must agree within `absolute + relative * the largest finite |expected|`.
"""

from __future__ import annotations

import math

import torch


def agreement(got: torch.Tensor, expected: torch.Tensor, relative: float,
              absolute: float) -> tuple[bool, float]:
    """Whether two same-shaped tensors agree, and the largest difference of their finite parts
    (inf where a non-finite entry differs)."""
    got, expected = got.detach().double(), expected.detach().double()
    finite = got.isfinite() & expected.isfinite()
    exact = (got == expected) | (got.isnan() & expected.isnan())
    if not bool((finite | exact).all()):
        return False, math.inf
    if not bool(finite.any()):
        return True, 0.0
    error = float((got[finite] - expected[finite]).abs().max())
    scale = float(expected[finite].abs().max())
    return error <= absolute + relative * scale, error
