"""Hostile specs against the spec language's bounds (issue 19, "bounds"): arithmetic on written
numbers and the total work a forward asks for. Each is refused by the real `gradexplain validate`
in a subprocess, fast (a timeout turns a hang into a failure), with exit 2 and one line that names
the file; a spec just under each bound still validates."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.cli import REPO

# Validate is refused or accepted in well under a second; the limit is for a loaded machine. The
# hostile specs hung (10 ** 10 ** 8) or ran for minutes before the bounds.
VALIDATE_TIMEOUT = 15.0

Write = Callable[[str], Path]


def validate(path: Path, *more: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "gradexplain", "validate", str(path), *more],
                          capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=VALIDATE_TIMEOUT, check=False)


def refused(path: Path) -> str:
    """The one error line of a refused spec, after the checks every refusal must pass."""
    done = validate(path)
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {path}:"), lines[0]
    return lines[0]


def accepted(path: Path) -> None:
    done = validate(path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def one_step(expression: str) -> str:
    return ("inputs:\n  x: {rand: [3], requires_grad: true}\n"
            f"forward:\n  - \"y = {expression}\"\n  - \"z = sum(y)\"\nbackward: z\n")


# --- arithmetic on written numbers -------------------------------------------------------------

# (the expression, a word our message must hold)
BAD_ARITHMETIC = [
    ("x * (1/0)", "zero"),
    ("x * (1.5 / 0.0)", "zero"),
    ("x * 0.0 ** -1", "zero"),
    ("x / (0 ** -2)", "zero"),
    ("x * (0 - 8) ** 0.5", "real number"),
    ("x + (-(8) ** 0.5 - (0 - 2) ** 1.5)", "real number"),
    ("x * (10 ** 10 ** 8)", "too large"),
    ("x * (10 ** 10 ** 30)", "too large"),
    ("x * (2 ** 128)", "too large"),
    ("x * 0.5 ** -200", "too large"),
    ("x * (1e38 * 10)", "too large"),
    ("x * (3e38 + 3e38)", "too large"),
    ("x * (1e38 * 1e38 / 1e38)", "too large"),  # too large on the way
]


@pytest.mark.parametrize(("expression", "word"), BAD_ARITHMETIC,
                         ids=[expression for expression, _ in BAD_ARITHMETIC])
def test_constant_arithmetic_is_refused_at_validate(expression: str, word: str,
                                                    write_spec: Write) -> None:
    message = refused(write_spec(one_step(expression)))
    assert ":4:" in message, message  # the line of the step, then its column
    assert "forward[0]" in message, message  # the key path
    assert expression[:8] in message, message  # the step, quoted
    assert word in message, message


@pytest.mark.parametrize("expression", [
    "x * (2 ** 127)",           # 1.7e38: under float32's largest, 3.4e38
    "x * (3.4e38 - 1e30)",
    "x * (1 ** 10 ** 30)",      # a huge exponent of 1 is 1, computed in no time
    "x * ((0 - 1) ** 10 ** 20)",
    "x * ((0 - 8) ** 2.0)",     # a negative base to a whole (float) power is real
    "x * (0 ** 0) / (0.5 ** 100)",
])
def test_constant_arithmetic_within_bounds_validates(expression: str, write_spec: Write) -> None:
    accepted(write_spec(one_step(expression)))


def test_folded_constants_are_kept_for_later_steps(write_spec: Write) -> None:
    """The checker keeps each folded value (a negated or named number too), so a constant step
    read later folds on: 2 ** 3 / 4 - -1 is 3, and c * c is 9; 9 ** 41 is over the bound."""
    spec = ("inputs:\n  x: {rand: [3], requires_grad: true}\n"
            "forward:\n  - \"c = 2 ** 3 / 4 - -1\"\n  - \"d = c * c\"\n  - \"e = d ** 41\"\n"
            "  - \"y = x * e\"\n  - \"z = sum(y)\"\nbackward: z\n")
    assert 9.0 ** 41 > 3.4028234663852886e38 > 9.0 ** 40
    message = refused(write_spec(spec))
    assert "forward[2]" in message and "too large" in message, message
    accepted(write_spec(spec.replace("d ** 41", "d ** 40")))
