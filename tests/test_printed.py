"""Printed numbers compared as another CPU can change them (tests/helpers/printed.py): its last
digit passes, any real change fails."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers.cli import GOLDEN
from tests.helpers.golden_json import json_mismatch
from tests.helpers.printed import (
    NOISE_FLOOR,
    RELATIVE,
    assert_printed,
    close_enough,
    first_mismatch,
    numbers_agree,
    printed_numbers,
    same_printout,
)

# Pairs seen between this machine's default float path and ATEN_CPU_CAPABILITY=default, and
# reported from another CPU (issue 15): the same numbers, rounded differently.
SAME = [
    ("0.074458", "0.074459"),
    ("0.0016481", "0.001648"),  # the last digit became 0 and was dropped: one character less
    ("0.0043662", "0.0043661"),
    ("-0.010172", "-0.010172"),
    ("1", "0.99999"),
    ("1", "1.0001"),  # one unit in the fifth significant digit, at the bottom of a decade
    ("5.9605e-08", "7.4506e-08"),  # a verified check's max abs error: rounding noise
    ("0", "3.8147e-06"),
]

DIFFERENT = [
    ("0.18746", "0.18846"),  # a wrong number
    ("0.18746", "-0.18746"),  # a wrong sign
    ("0.00030640", "0.00031640"),  # small, but not noise: 3% off
    ("385", "386"),  # a count
    ("0", "1"),  # an index
    ("10000", "10001"),  # integers are exact, however large
    ("1e-05", "2e-05"),  # at the noise floor, not below it
]


@pytest.mark.parametrize("expected, got", SAME)
def test_a_rounding_difference_agrees(expected: str, got: str) -> None:
    assert numbers_agree(expected, got)
    assert numbers_agree(got, expected)


@pytest.mark.parametrize("expected, got", DIFFERENT)
def test_a_different_number_does_not(expected: str, got: str) -> None:
    assert not numbers_agree(expected, got)
    assert not numbers_agree(got, expected)


def test_the_tolerance_is_the_one_stated() -> None:
    assert RELATIVE == 1e-4 and NOISE_FLOOR == 1e-5
    assert numbers_agree("2", "2.0002")
    assert not numbers_agree("2", "2.0005")


def test_a_narrower_number_may_shift_the_columns_after_it() -> None:
    golden = ("  grad_input[0]   [0.0016481, 0.2]   ✓  legacy\n"
              "  grad_input[1]   [1, 2]             ✓  full\n")
    output = ("  grad_input[0]   [0.001648, 0.2]   ✓  legacy\n"
              "  grad_input[1]   [1, 2]             ✓  full\n")
    assert first_mismatch(golden, output) is None


@pytest.mark.parametrize("output, reason", [
    ("x = [0.18846, 2]  ✓ ok\n", "0.18846 is not 0.18746"),
    ("x = [0.18746, 2]  ✗ ok\n", "the text differs"),
    ("y = [0.18746, 2]  ✓ ok\n", "the text differs"),
    ("x = [0.18746]  ✓ ok\n", "the text differs"),  # a number lost
    ("x = [0.18746, 2, 3]  ✓ ok\n", "the text differs"),  # a number gained
    ("x = [0.18746,2]  ✓ ok\n", "the text differs"),  # spacing inside text is text
    ("x = [0.18746, 2]  ✓ ok\nmore\n", "the text differs"),
    ("x = [0.18746, 2]  ✓ ok", "lines"),  # the final newline is part of the file
    ("module3: x = [0.18746, 2]  ✓ ok\n", "the text differs"),
], ids=["number", "mark", "name", "fewer-numbers", "more-numbers", "spacing", "extra-line",
        "no-final-newline", "name-digit"])
def test_every_other_change_fails(output: str, reason: str) -> None:
    golden = "x = [0.18746, 2]  ✓ ok\n"
    mismatch = first_mismatch(golden, output)
    assert mismatch is not None
    assert reason in mismatch.reason


def test_a_digit_inside_a_name_is_text_not_a_number() -> None:
    assert first_mismatch("module2.l on MulBackward0\n", "module3.l on MulBackward0\n")
    assert first_mismatch("--input 4x3\n", "--input 4x4\n")


def test_a_real_golden_file_catches_one_wrong_number() -> None:
    """A golden file as the suite compares it: equal to itself, equal after every number is
    nudged by a rounding-sized amount, and not equal with one number changed in its third
    significant digit."""
    text = (GOLDEN / "report" / "multi_output.md").read_text(encoding="utf-8")
    assert first_mismatch(text, text) is None

    decimals = list(re.finditer(r"(?<![\w.])-?\d+\.\d{4,}(?![\w.])", text))
    assert len(decimals) > 100

    def nudge(match: re.Match[str]) -> str:
        value = float(match.group())
        return f"{value * (1 + 2e-5):.5g}"

    nudged = re.sub(r"(?<![\w.])-?\d+\.\d{4,}(?![\w.])", nudge, text)
    assert nudged != text
    assert first_mismatch(text, nudged) is None

    target = decimals[len(decimals) // 2]
    wrong = f"{float(target.group()) * 1.003:.5g}"
    changed = text[:target.start()] + wrong + text[target.end():]
    mismatch = first_mismatch(text, changed)
    assert mismatch is not None
    assert mismatch.line == text.count("\n", 0, target.start()) + 1
    assert wrong in mismatch.got


def test_non_finite_numbers_are_numbers_that_equal_only_themselves() -> None:
    assert printed_numbers("[inf, -inf, nan, 0.5]")[:2] == [float("inf"), float("-inf")]
    assert numbers_agree("inf", "inf") and numbers_agree("nan", "nan")
    assert not numbers_agree("inf", "-inf")
    assert not numbers_agree("nan", "0")
    assert not close_enough(float("nan"), 0.0)
    assert first_mismatch("error inf\n", "error 1e+30\n") is not None


def test_a_printed_value_against_the_value_torch_computed() -> None:
    assert_printed("[-0.13966, 0.05324]", [-0.1396604, 0.0532397])
    assert_printed("-0.041205", -0.0412045)
    assert_printed("[1.2e-17, 0]", [-3e-18, 0.0])  # zero up to rounding on either machine
    for wrong in ([-0.13966], [-0.13866, 0.05324], [0.05324, -0.13966]):
        with pytest.raises(AssertionError):
            assert_printed("[-0.13966, 0.05324]", wrong)


def test_a_printout_line_against_the_real_one() -> None:
    real = "      grad_input[0]   ∂z/∂t  [0.18746]  ✓"
    assert same_printout("      grad_input[0]   ∂z/∂t  [0.18747]     ✓", real)
    assert not same_printout("      grad_input[1]   ∂z/∂t  [0.18746]  ✓", real)
    assert not same_printout("      grad_input[0]   ∂z/∂y  [0.18746]  ✓", real)
    assert not same_printout("  grad_input[0]   ∂z/∂t  [0.18746]  ✓", real)  # indentation
    assert not same_printout("      grad_input[0]   ∂z/∂t  [0.19746]  ✓", real)


# --- JSON golden files (tests/helpers/golden_json.py) ------------------------------------------

def _doc(values: object, seq: object = 3, name: object = "grad_input[0]") -> str:
    return json.dumps({"events": [{"seq": seq, "args": [{"name": name, "value": values}]}]})


def test_json_golden_allows_rounding_relative_to_the_tensors_largest_value() -> None:
    # -0.000263 computed as a difference of values near 2: another order of rounding moves it
    # by 3e-7, which is 1e-3 of itself but 1.5e-7 of the tensor.
    assert json_mismatch(_doc([[2.0, -0.00026285]]), _doc([[2.0000001, -0.00026314]])) is None


def test_json_golden_refuses_a_value_off_by_more_than_the_tensors_rounding() -> None:
    found = json_mismatch(_doc([[2.0, -0.00026285]]), _doc([[2.0, -0.0011]]))
    assert found is not None and "value 1" in found


def test_json_golden_refuses_changed_keys_text_and_integers() -> None:
    assert json_mismatch(_doc([1.0]), _doc([1.0], seq=4)) is not None
    assert json_mismatch(_doc([1.0]), _doc([1.0], name="grad_input[1]")) is not None
    assert json_mismatch(_doc([1.0]), _doc([1.0, 2.0])) is not None
    assert json_mismatch(_doc([1.0]), _doc(None)) is not None
    assert json_mismatch('{"a": 1, "b": 2}', '{"b": 2, "a": 1}') is not None


def test_json_golden_compares_a_number_alone_by_its_own_size() -> None:
    assert json_mismatch('{"x": -0.0412045}', '{"x": -0.0412046}') is None
    assert json_mismatch('{"x": -0.0412045}', '{"x": -0.0413}') is not None
