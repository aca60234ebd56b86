"""How a value gradexplain computed is compared with the one it must equal: the one comparison
(`agreement`) and every check's tolerance, each with its reason, written down here once.

One rule for every check (labels, captures, interventions, the vector-Jacobian identities), so
that none fails where another passes: tensors of different shapes never agree; entries that are
inf or nan on either side must agree exactly (log(0) is -inf, 0 * inf is nan: values like any
other); and the finite rest must agree within `absolute + relative * scale`, the scale being the
largest finite |expected| (or of the terms `expected` was summed from).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch

from gradexplain.capture.remembered import remembered
from gradexplain.capture.values import recorded_tensor, tensor_value
from gradexplain.records.check import NOT_FINITE_SUMMARY
from gradexplain.records.trace import Summary, TensorValue
from gradexplain.records.walk import Check


@dataclass(frozen=True)
class Tolerance:
    """How far a value may be from the one it must equal: `absolute + relative * scale`."""

    relative: float
    absolute: float


# Every check of a value against the same value computed again: a label against the hook-free
# run, a captured activation against a hook-free build's, a gradient with an intervention against
# the one without plus the vector-Jacobian product of the change. float32 arithmetic in another
# order may differ in the last bits (separate builds are identical bit for bit, but a kernel may
# reorder a sum): a check allows that much relative to the tensor's largest value. No absolute
# allowance: in a deep model gradients and activations can be 1e-17 throughout, and a fixed one
# would let any two tiny tensors match, so a wrong value there would pass. The floor only lets
# exact zeros equal each other.
RECOMPUTED = Tolerance(relative=1e-4, absolute=1e-30)
# The vector-Jacobian identities (`identity_tolerance`): their two sides are computed in different
# orders (jacrev's batched rows against autograd's single pass), so they differ by the rounding of
# the dtype they are computed in, relative to the larger magnitude involved; a side near 0 summed
# from terms near 1 keeps the terms' rounding, hence an absolute part of the same size.
IDENTITY_RELATIVE = {torch.float64: 1e-10, torch.float32: 1e-5}
LOW_PRECISION_RELATIVE = 1e-2  # float16, bfloat16


def identity_tolerance(*dtypes: torch.dtype) -> Tolerance:
    """The identities' tolerance for sides of these dtypes: that of the least precise one."""
    relative = max(IDENTITY_RELATIVE.get(dtype, LOW_PRECISION_RELATIVE) for dtype in dtypes)
    return Tolerance(relative=relative, absolute=relative)


def agreement(got: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance,
              *terms: torch.Tensor) -> tuple[bool, float]:
    """Whether two tensors agree within `tolerance`, and the largest difference of their finite
    parts (inf where the shapes or a non-finite entry differ).

    `terms` are the tensors `expected` was summed from, if it was: their rounding is of their
    size, not of the sum's (1e30 - 1e30 + 0.5 in float32 keeps nothing of the 0.5), so the
    tolerance is relative to the largest of them too."""
    if tuple(got.shape) != tuple(expected.shape):
        return False, math.inf
    got, expected = got.detach().double(), expected.detach().double()
    relative, absolute = tolerance.relative, tolerance.absolute
    if got.numel() == 0:
        return True, 0.0
    # The common case first, as cheaply as one subtraction: a capture makes thousands of checks.
    error = float((got - expected).abs().max())
    scale = float(expected.abs().max())
    if math.isfinite(error) and math.isfinite(scale) and not terms:
        return error <= absolute + relative * scale, error
    finite = got.isfinite() & expected.isfinite()
    exact = (got == expected) | (got.isnan() & expected.isnan())
    if not bool((finite | exact).all()):
        return False, math.inf
    if not bool(finite.any()):
        return True, 0.0
    error = float((got[finite] - expected[finite]).abs().max())
    scale = max(_largest_finite(tensor) for tensor in (expected[finite], *terms))
    return error <= absolute + relative * scale, error


def _summaries_agreement(got: Summary, expected: tuple[float, ...],
                         tolerance: Tolerance) -> tuple[bool, float] | None:
    """`agreement`'s common case for a summary's four numbers, on Python floats: the same
    float64 arithmetic, without four small torch calls for four numbers (a deep model's capture
    checks thousands of summaries). None where a number is not finite: `agreement` decides."""
    numbers = (got.min, got.max, got.mean, got.norm)
    if not all(math.isfinite(number) for number in numbers + expected):
        return None
    error = max(abs(number - reference) for number, reference in zip(numbers, expected,
                                                                       strict=True))
    scale = max(abs(reference) for reference in expected)
    if not math.isfinite(error):
        return None
    return error <= tolerance.absolute + tolerance.relative * scale, error


def _largest_finite(tensor: torch.Tensor) -> float:
    values = tensor.detach().double()
    values = values[values.isfinite()]
    return float(values.abs().max()) if values.numel() else 0.0


class _Expected:
    """What every check against one expected tensor compares with, computed once for it: its
    record, and its values in float64 (dense) or their summary's four numbers, each when first
    needed (a large tensor's float64 copy is not kept: only a value up to the value limit is
    compared in full)."""

    def __init__(self, expected: torch.Tensor) -> None:
        self.expected = expected.detach()
        self.value = tensor_value(expected)
        # Each recorded value's check against it, by the value's id (the value kept, so that
        # no other takes the id): a deep model checks the same value against the same tensor
        # several times over (1,887 checks of 381 distinct pairs on the 50-layer MLP).
        self.checks: dict[int, tuple[TensorValue, Check]] = {}

    def check(self, value: TensorValue) -> Check:
        found = self.checks.get(id(value))
        if found is None:
            found = self.checks[id(value)] = (value, _compared(value, self))
        return found[1]

    def float64(self) -> torch.Tensor:
        reference = self.expected.double()
        if reference.layout != torch.strided:  # a sparse gradient: recorded as its dense values
            reference = reference.to_dense()
        return reference

    @cached_property
    def reference(self) -> torch.Tensor:
        return self.float64()

    @cached_property
    def summary(self) -> torch.Tensor:
        reference = self.float64()
        return torch.stack([reference.min(), reference.max(), reference.mean(),
                            reference.norm()])

    @cached_property
    def summary_numbers(self) -> tuple[float, ...]:
        recorded = self.value.summary if self.value is not None else None
        if recorded is not None:
            # The record's summary is of the same float64 copy: its mean and norm are those
            # below bit for bit, its extremes equal in value (aminmax may give a zero another
            # sign than min or max: no difference, nor error, changes with it).
            return (recorded.min, recorded.max, recorded.mean, recorded.norm)
        return tuple(self.summary.tolist())


def says_too_little(value: TensorValue | None) -> str | None:
    """Why `value` cannot be checked, if it cannot: a summary with a nan or an inf in it. One
    nan anywhere makes two tensors' summaries agree (nan with nan), and a check would verify
    a value whose every finite entry is wrong. None where a check means what it says."""
    summary = None if value is None or value.value is not None else value.summary
    if summary is None or all(math.isfinite(number) for number in (
            summary.min, summary.max, summary.mean, summary.norm)):
        return None
    return NOT_FINITE_SUMMARY


def check(value: TensorValue | None, expected: torch.Tensor) -> Check:
    """Compare a recorded value with the independently computed one."""
    known = remembered(expected, "expected", _Expected)
    if value is None or tuple(value.shape) != tuple(expected.shape):
        return Check(False, math.inf, known.value)
    return known.check(value)


def _compared(value: TensorValue, known: _Expected) -> Check:
    """`check` of a value of the expected tensor's shape."""
    if value.value is None:
        assert value.summary is not None
        quick = _summaries_agreement(value.summary, known.summary_numbers, RECOMPUTED)
        if quick is not None:
            return Check(*quick, known.value)
        got = torch.tensor([value.summary.min, value.summary.max, value.summary.mean,
                            value.summary.norm], dtype=torch.float64)
        reference = known.summary
    else:
        got = recorded_tensor(value)
        reference = known.reference
    verified, error = agreement(got, reference, RECOMPUTED)
    return Check(verified, error, known.value)
