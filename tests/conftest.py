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
def golden(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Compare output with its golden file, numbers within a tolerance (tests/helpers/printed.py
    says which; a JSON file passes `mismatch=json_mismatch`, tests/helpers/golden_json.py);
    `--update-golden` rewrites the file instead, the only way to change one."""
    update = bool(request.config.getoption("--update-golden"))

    def compare(name: str, text: str,
                mismatch: Callable[[str, str], object | None] = first_mismatch) -> None:
        path = GOLDEN / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.exists(), f"no golden file {path}: run pytest --update-golden, read it"
        expected = path.read_text(encoding="utf-8")
        found = mismatch(expected, text)
        if found is not None:
            changes = "".join(list(difflib.unified_diff(
                expected.splitlines(keepends=True), text.splitlines(keepends=True),
                str(path), "today's output"))[:60])
            pytest.fail(f"output differs from {path} at {found}\n(if intended: pytest "
                        f"--update-golden, then read the diff)\n{changes}", pytrace=False)

    return compare
