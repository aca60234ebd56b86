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

from gradexplain.records.session import Session
from tests.printed import first_mismatch

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
    from gradexplain.language import read_spec_text

    name = f"specs/{spec_file}"
    return capture_text(read_spec_text(SPECS / spec_file), name)


def capture_text(text: str, name: str) -> Session:
    """The session `gradexplain walk` captures for spec text `text` read from file `name`."""
    from gradexplain.capture.pipeline import capture
    from gradexplain.language import load_spec_text

    return capture(load_spec_text(text, name), name, text)


GOLDEN = REPO / "tests" / "golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="Rewrite the golden files under tests/golden from today's output "
                          "(then read `git diff tests/golden` before committing).")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Compare output with its golden file, numbers within a tolerance (tests/printed.py
    says which); `--update-golden` rewrites the file instead, the only way to change one."""
    update = bool(request.config.getoption("--update-golden"))

    def compare(name: str, text: str) -> None:
        path = GOLDEN / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.exists(), f"no golden file {path}: run pytest --update-golden, read it"
        expected = path.read_text(encoding="utf-8")
        mismatch = first_mismatch(expected, text)
        if mismatch is not None:
            import difflib

            changes = "".join(list(difflib.unified_diff(
                expected.splitlines(keepends=True), text.splitlines(keepends=True),
                str(path), "today's output"))[:60])
            pytest.fail(f"output differs from {path} at {mismatch}\n(if intended: pytest "
                        f"--update-golden, then read the diff)\n{changes}", pytrace=False)

    return compare
