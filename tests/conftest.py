"""Shared helpers: run the real command line in a subprocess, write spec files."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gradexplain.session import Session

REPO = Path(__file__).resolve().parent.parent
SPECS = REPO / "specs"


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None) -> Result:
    """Run `python -m gradexplain ARGS` as a user would, with colour off."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "gradexplain", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=env,
        timeout=120,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write YAML text to a file in a temporary folder and return its path."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@functools.cache
def captured(spec_file: str) -> Session:
    """One capture per spec for the whole test run: the renderers' tests all read it."""
    from gradexplain.derive import capture
    from gradexplain.spec import load_spec

    path = SPECS / spec_file
    return capture(load_spec(path), f"specs/{spec_file}", path.read_text(encoding="utf-8"))
