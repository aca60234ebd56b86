"""ruff and mypy --strict are part of the test suite, so CI holds the code to them too."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.cli import REPO


def run_tool(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)


def test_ruff_is_clean() -> None:
    done = run_tool("ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_is_clean() -> None:
    done = run_tool("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
