"""Arithmetic on the numbers written in a step (`x * (1/0)`, `10 ** 10 ** 8`), done safely.

A step may combine plain numbers before they meet a tensor; Python would evaluate them exactly as
written, so `1/0` raises, `(0 - 8) ** 0.5` is a complex number and `10 ** 10 ** 8` computes an
integer of a hundred million digits (minutes, gigabytes). The checker folds every such operation
here at validate time, with the bound literals have (LARGEST_NUMBER), and the builder folds through
the same function at run time, so the two agree and neither can hang or raise anything but a
ConstantProblem. Powers are judged by their size (from logarithms) before any is computed.
"""

from __future__ import annotations

import math

from gradexplain.errors import show_number
from gradexplain.language.expr import LARGEST_NUMBER

_LARGEST_LOG2 = math.log2(LARGEST_NUMBER)

Scalar = float | int | bool
_BOUND = ("numbers in a spec, and the results of arithmetic on them, are at most 3.4e38 in size, "
          "the largest a float32 tensor holds")


class ConstantProblem(ArithmeticError):
    """Arithmetic on written numbers that has no number within bounds as its result.
    `too_large` tells a bound (overflow, a huge power) from a result that does not exist. An
    ArithmeticError, so the builder's step runner reports it as it reports 1/0 from torch."""

    def __init__(self, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def fold(op: str, left: Scalar, right: Scalar) -> Scalar:
    """`left op right` as Python computes it, or a ConstantProblem; never a complex number,
    an infinity, a nan or a number larger than LARGEST_NUMBER."""
    shown = f"{_show(left)} {op} {_show(right)}"
    if op == "/" and right == 0:
        raise ConstantProblem(f"{shown} divides by zero")
    if op == "**":
        result = _power(left, right, shown)
    elif op == "+":
        result = left + right
    elif op == "-":
        result = left - right
    elif op == "*":
        result = left * right
    elif op == "/":
        result = left / right
    else:
        raise ConstantProblem(f"{op} needs tensors, not the numbers {shown}")
    return _bounded(result, shown)


def _power(base: Scalar, exponent: Scalar, shown: str) -> Scalar:
    if base == 0 and exponent < 0:
        raise ConstantProblem(f"{shown} divides by zero (zero to a negative power)")
    if base < 0 and not float(exponent).is_integer():
        raise ConstantProblem(f"{shown} is not a real number (a negative number to a "
                              "fractional power)")
    magnitude = abs(base)
    try:
        # Judged before computing: 10 ** 10 ** 8 would build an integer of 10**8 digits.
        # (float(exponent) overflows only for an exponent past 1e308: too large as well.)
        if magnitude not in (0, 1) and float(exponent) * math.log2(magnitude) > _LARGEST_LOG2 + 1:
            raise OverflowError
        result: Scalar = base ** exponent
    except OverflowError:
        raise ConstantProblem(f"{shown} is too large: {_BOUND}", too_large=True) from None
    return result


def _bounded(result: object, shown: str) -> Scalar:
    if isinstance(result, complex):  # not reachable after _power's test; kept as the contract
        raise ConstantProblem(f"{shown} is not a real number")
    assert isinstance(result, float | int)
    if isinstance(result, float) and math.isnan(result):
        raise ConstantProblem(f"{shown} is not a number (nan)")
    if not abs(result) <= LARGEST_NUMBER:
        raise ConstantProblem(f"{shown} is too large: {_BOUND}", too_large=True)
    return result


def _show(value: Scalar) -> str:
    """An operand as the message writes it: negatives in brackets, so `(-8) ** 0.5` reads right."""
    # As written in a step (`2 ** 1000`, not `2 ** 1,000`), unless too long to quote.
    text = show_number(value) if isinstance(value, int) and abs(value) >= 10**15 else str(value)
    return f"({text})" if value < 0 or text.startswith(("a ", "an ")) else text
