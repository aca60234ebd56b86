"""ruff and mypy --strict are part of the test suite, so CI holds the code to them too."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

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


def test_capture_imports_nothing_from_render() -> None:
    # Layers: capture turns torch into records, render turns records into text. A capture module
    # importing render/ would make the records depend on how they are shown.
    leaks = [f"{path.relative_to(REPO)}: {name}"
             for path in sorted((REPO / "gradexplain" / "capture").rglob("*.py"))
             for name in _imported_modules(path) if name.startswith("gradexplain.render")]
    assert leaks == []


def _imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names
