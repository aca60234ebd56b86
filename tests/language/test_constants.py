"""Arithmetic on written numbers (language/constants.py) against Python's own: the same value
whenever Python's is a real number within the literal bound, a ConstantProblem whenever it is
not (Python raising, a complex number, inf, nan, or too large), and never a hang."""

from __future__ import annotations

import math
import operator
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradexplain.language.constants import ConstantProblem, fold
from gradexplain.language.expr import LARGEST_NUMBER

PYTHON: dict[str, Callable[[object, object], object]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "**": operator.pow,
}
BOUND = 3.4028234663852886e38  # float32's largest finite value, written here, not imported

# Numbers within the literal bound; whole exponents small enough that Python's own ** (the
# oracle) finishes at once.
numbers = st.one_of(
    st.integers(-10**6, 10**6),
    st.floats(-BOUND, BOUND, allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 0.0, -0.0, 1, -1, 2, 0.5, -8, 10, True, False, 3.4e38, -3.4e38]),
)
exponents = st.one_of(st.integers(-400, 400), st.floats(-400.0, 400.0),
                      st.sampled_from([0.5, -1, 1.5, 1 / 3]))


def python_says(op: str, left: object, right: object) -> float | int | None:
    """Python's own result, or None where it is no real number within the bound."""
    try:
        result: Any = PYTHON[op](left, right)
    except (ArithmeticError, ValueError):
        return None
    if isinstance(result, complex):
        return None
    if isinstance(result, int):
        return result if abs(result) <= BOUND else None  # exact: a huge int has no float
    return result if math.isfinite(result) and abs(result) <= BOUND else None
    return result


def check(op: str, left: object, right: object) -> None:
    expected = python_says(op, left, right)
    if expected is None:
        with pytest.raises(ConstantProblem):
            fold(op, left, right)  # type: ignore[arg-type]
        return
    got = fold(op, left, right)  # type: ignore[arg-type]
    assert math.isclose(got, expected, rel_tol=1e-12, abs_tol=0.0), (op, left, right)
    assert type(got) is type(expected) or isinstance(expected, bool)


def test_the_bound_is_float32s_largest() -> None:
    assert LARGEST_NUMBER == BOUND


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(["+", "-", "*", "/"]), numbers, numbers)
def test_the_four_operations_agree_with_python(op: str, left: object, right: object) -> None:
    check(op, left, right)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(numbers, exponents)
def test_powers_agree_with_python(base: object, exponent: object) -> None:
    check("**", base, exponent)


@pytest.mark.parametrize(("op", "left", "right"), [
    ("/", 1, 0), ("/", 1.0, -0.0), ("/", 0, 0), ("**", 0.0, -1), ("**", 0, -2),
    ("**", -8, 0.5), ("**", -2, 1.5), ("**", 2, 128), ("**", 10.0, 39), ("*", 1e38, 10),
    ("+", 3e38, 3e38), ("-", -3e38, 3e38), ("**", 0.5, -200),
])
def test_what_python_cannot_give_is_a_constant_problem(op: str, left: float,
                                                       right: float) -> None:
    assert python_says(op, left, right) is None
    with pytest.raises(ConstantProblem):
        fold(op, left, right)


@contextmanager
def alarm(seconds: int) -> Iterator[None]:
    def fail(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("the fold did not finish")
    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(("base", "exponent", "result"), [
    (10, 10**8, None), (10, 10**30, None), (-3, 3 * 10**38, None), (2, 10**20, None),
    (1, 10**30, 1), (-1, 10**30, 1), (-1, 10**30 + 1, -1), (0, 10**30, 0),
])
def test_huge_exponents_are_judged_before_computing(base: int, exponent: int,
                                                    result: int | None) -> None:
    """Python's own 10 ** 10 ** 8 takes minutes: the fold must answer at once."""
    with alarm(5):
        if result is None:
            with pytest.raises(ConstantProblem) as caught:
                fold("**", base, exponent)
            assert caught.value.too_large
        else:
            assert fold("**", base, exponent) == result
