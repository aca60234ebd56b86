"""A check: a claim computed independently and compared with what was recorded, and a failed
one with where it was made. Every stage's checks are these (capture/checks.py makes them).
"""

from __future__ import annotations

from dataclasses import dataclass

from gradexplain.records.frozen import quick_init
from gradexplain.records.trace import Mode, TensorValue

# Why a value recorded as a summary holding a nan or an inf is not checked
# (`capture.checks.says_too_little`).
NOT_FINITE_SUMMARY = (
    "recorded as a summary (it has more elements than the value limit), and a nan or an inf "
    "makes its min, max, mean and norm nan or inf whatever its other values are, so no check "
    "can tell it from another value of its shape; up to 10,000 elements are recorded whole "
    "with --max-values 10000 (explain(..., max_values=10_000))")


def summaries_not_checked_text(count: int) -> str:
    """The line under a verdict for `count` values not checked for NOT_FINITE_SUMMARY."""
    values = "value" if count == 1 else "values"
    return (f"{count:,} labelled {values} not checked: recorded as summaries holding nan or "
            "inf, which say nothing of their other values (--max-values 10000 records up to "
            "10,000 elements whole)")


@quick_init
@dataclass(frozen=True)
class Check:
    """The label's claim computed independently (a hook-free run) and compared with the value."""

    verified: bool
    max_abs_err: float
    expected: TensorValue | None
    # Why a claim could not hold whatever the value: it names no tensor of the graph, or one
    # name stands for several, or its layout does not fit.
    why: str | None = None


@dataclass(frozen=True)
class Failure:
    """A check that failed: where, and what was claimed."""

    mode: Mode | None
    where: str
    claim: str
    check: Check


__all__ = ["NOT_FINITE_SUMMARY", "Check", "Failure", "summaries_not_checked_text"]
