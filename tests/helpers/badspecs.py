"""A bad spec as a test case: its text, where the one-line error must point, its key path and
what it must say; and the assertion that `validate` says exactly that, through the command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.helpers.cli import run_cli


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    # Where the error must point: "LINE:ANCHOR" means the column where ANCHOR first starts on
    # that line of `text` (found with str.index, independently of the tool); "LINE:COL" with a
    # number is taken as written; "" means the error is about the whole file.
    where: str
    key_path: str  # "" where the error has no key path
    says: tuple[str, ...]  # fragments the message must contain

    def line_col(self) -> str:
        if not self.where:
            return ""
        line, anchor = self.where.split(":", 1)
        if anchor.isdigit():
            return self.where
        column = self.text.splitlines()[int(line) - 1].index(anchor) + 1
        return f"{line}:{column}"


def assert_one_clear_line(case: Case, path: Path) -> None:
    """`validate` of the spec at `path` (`case.text`) exits 2 with one line that points where
    `case` says and says what it says."""
    result = run_cli("validate", str(path))
    assert result.code == 2, result
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    message = lines[0]
    assert message.startswith(f"error: {path}")
    if case.where:
        assert message.startswith(f"error: {path}:{case.line_col()}: "), message
    if case.key_path:
        assert f" at {case.key_path}: " in message, message
    for fragment in case.says:
        assert fragment in message, (fragment, message)
