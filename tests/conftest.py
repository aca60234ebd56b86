"""Fixtures and options only (pytest reads them here); shared code is in tests/helpers/."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.cli import GOLDEN
from tests.helpers.printed import first_mismatch


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write YAML text to a file in a temporary folder and return its path."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="Rewrite the golden files under tests/golden from today's output "
                          "(then read `git diff tests/golden` before committing).")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Compare output with its golden file, numbers within a tolerance (tests/helpers/printed.py
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
            changes = "".join(list(difflib.unified_diff(
                expected.splitlines(keepends=True), text.splitlines(keepends=True),
                str(path), "today's output"))[:60])
            pytest.fail(f"output differs from {path} at {mismatch}\n(if intended: pytest "
                        f"--update-golden, then read the diff)\n{changes}", pytrace=False)

    return compare
