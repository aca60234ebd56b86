"""A check: a claim computed independently and compared with what was recorded, and a failed
one with where it was made. Every stage's checks are these (capture/checks.py makes them).
"""

from __future__ import annotations

from dataclasses import dataclass

from gradexplain.records.frozen import quick_init
from gradexplain.records.trace import Mode, TensorValue


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


__all__ = ["Check", "Failure"]
