"""Numbers as gradexplain prints them, read back out of text and compared the way another CPU
can change them: the one rule for golden files, README excerpts and printed values in tests.

Another CPU (or another float code path on this one: MKL_CBWR, ATEN_CPU_CAPABILITY, a thread
count) rounds float32 differently in the last bit. `fmt` prints five significant digits, so a
printed number can then change by one unit in its last digit (0.074458 on one machine, 0.074459
on another), or lose a trailing zero and with it a character (0.0016481, 0.001648), which shifts
the columns after it. So:

- the text around the numbers must be the same, except for how many spaces pad a column;
- numbers printed as integers must be equal (counts, indices, sequence numbers);
- other numbers must agree within RELATIVE of the larger (one unit in the fifth significant
  digit, which is also the label checks' own tolerance), or both be below NOISE_FLOOR: a verified
  check's max abs error is float32 rounding noise (5.9605e-08 on one machine, 7.4506e-08 on
  another), as is a gradient that is zero up to rounding, and no value in a spec is that small.

Nothing here imports gradexplain or torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

RELATIVE = 1e-4
NOISE_FLOOR = 1e-5

# A number standing alone as fmt prints it (-0.041205, 2.812, 1.2346e-05, 300, inf, nan), not
# a digit inside a name (x1, module2, SigmoidBackward0, 4x3). Signs belong to the number, so
# -0.5 against 0.5 is a wrong number, not wrong text.
NUMBER = re.compile(r"(?<![\w.])-?(?:\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|inf|nan)(?![\w.])")


def printed_numbers(text: str) -> list[float]:
    """Every number in `text`, in order."""
    return [float(match) for match in NUMBER.findall(text)]


def printed_skeleton(text: str) -> str:
    """`text` with each number replaced by `#` and each run of inner spaces made one (columns
    are padded to their widest number, which a last digit can change); indentation is kept."""
    body = NUMBER.sub("#", text)
    indent = body[: len(body) - len(body.lstrip(" "))]
    return indent + " ".join(body.split())


def close_enough(got: float, want: float) -> bool:
    """The same number up to another CPU's rounding and to printing's (nan equals only nan,
    inf only itself)."""
    if math.isnan(got) or math.isnan(want):
        return math.isnan(got) and math.isnan(want)
    if abs(got) < NOISE_FLOOR and abs(want) < NOISE_FLOOR:
        return True
    return math.isclose(got, want, rel_tol=RELATIVE, abs_tol=0.0)


def numbers_agree(expected: str, got: str) -> bool:
    """Two printed numbers, by the rules in the module docstring."""
    if expected == got:
        return True
    if _is_integer(expected) and _is_integer(got):
        return False
    return close_enough(float(got), float(expected))


def same_printout(shown: str, real: str) -> bool:
    """Two printed lines say the same, their numbers agreeing by the rules above."""
    return _line_difference(real, shown) is None


def assert_printed(text: str, expected: float | Sequence[float], what: str = "") -> None:
    """`text` (a printed value such as `[-0.13966, 0.05324]` or `-0.041205`) shows exactly the
    numbers `expected` (flat, in order), each up to rounding."""
    want = [float(expected)] if isinstance(expected, int | float) else [float(item)
                                                                           for item in expected]
    got = printed_numbers(text)
    assert len(got) == len(want) and all(
        close_enough(a, b) for a, b in zip(got, want, strict=True)), (
        f"{what}: printed {text!r}, expected {want}")


@dataclass(frozen=True)
class Mismatch:
    """The first line where output and golden file disagree, and why."""

    line: int  # 1-based, in the golden file
    expected: str
    got: str
    reason: str

    def __str__(self) -> str:
        return (f"line {self.line}: {self.reason}\n  golden: {self.expected}\n"
                f"  output: {self.got}")


def first_mismatch(expected: str, got: str) -> Mismatch | None:
    """None when `got` matches the golden text `expected` line by line by the rules above."""
    expected_lines, got_lines = expected.split("\n"), got.split("\n")
    for number, (want, have) in enumerate(zip(expected_lines, got_lines, strict=False), 1):
        reason = _line_difference(want, have)
        if reason is not None:
            return Mismatch(number, want, have, reason)
    if len(expected_lines) != len(got_lines):
        return Mismatch(min(len(expected_lines), len(got_lines)) + 1, "", "",
                        f"the golden file has {len(expected_lines)} lines, the output "
                        f"{len(got_lines)}")
    return None


def _line_difference(expected: str, got: str) -> str | None:
    if expected == got:
        return None
    want_numbers, have_numbers = NUMBER.findall(expected), NUMBER.findall(got)
    if printed_skeleton(expected) != printed_skeleton(got) or len(want_numbers) != len(
            have_numbers):
        return "the text differs"
    for want, have in zip(want_numbers, have_numbers, strict=True):
        if not numbers_agree(want, have):
            return f"{have} is not {want} (tolerance: relative {RELATIVE:g})"
    return None


def _is_integer(text: str) -> bool:
    return text.lstrip("-").isdigit()
