"""What the user's own Python prints while gradexplain runs it, kept off stdout.

stdout is gradexplain's alone: `walk --format json` must parse and `report` without `-o` must
be the page. A Python model's code (at import, in its factory, forward or hooks) may print;
`captured_stdout` collects that for the whole time the user's code can run, bounded in size (a
forward printing in a loop cannot fill the memory), and `ModelOutput.lines` gives it back as
`model output: ...` lines for the command line to show on stderr. Torch-free. Text written to
the file descriptor itself (C code, `os.write(1, ...)`) is not seen here.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout

PREFIX = "model output: "
MAX_LINES = 40  # the lines shown; the rest are counted
MAX_LINE = 300  # characters of one line shown


class ModelOutput(io.TextIOBase):
    """A write-only text stream keeping the first MAX_LINES lines (each cut to MAX_LINE
    characters) and counting the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[str] = []
        self.partial = ""
        self.more = 0  # lines past MAX_LINES, counted and dropped

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        pieces = (self.partial + text).split("\n") if len(self.kept) < MAX_LINES else None
        if pieces is None:  # full: only count, without building strings
            self.more += text.count("\n")
            self.partial = "." if text and not text.endswith("\n") else ""
            return len(text)
        self.partial = pieces.pop()[:MAX_LINE + 1]
        for line in pieces:
            if len(self.kept) < MAX_LINES:
                self.kept.append(line[:MAX_LINE + 1])
            else:
                self.more += 1
        return len(text)

    def lines(self) -> list[str]:
        """What was printed, as `model output: ...` lines (non-printable characters escaped,
        long lines cut), and a last line counting what was left out."""
        kept = self.kept + ([self.partial] if self.partial and len(self.kept) < MAX_LINES
                            else [])
        more = self.more + (1 if self.partial and len(self.kept) >= MAX_LINES else 0)
        shown = [PREFIX + _cut(_printable(line)) for line in kept]
        if more:
            shown.append(f"{PREFIX}... {more:,} more line(s) not shown")
        return shown


def _printable(line: str) -> str:
    # The model's text may hold terminal control sequences: shown escaped, never acted on.
    return "".join(char if char.isprintable() or char == "\t" else
                   repr(char)[1:-1] for char in line.rstrip("\r"))


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + "..."


@contextmanager
def captured_stdout() -> Iterator[ModelOutput]:
    """Within the block, `print()` and `sys.stdout` go to the ModelOutput yielded."""
    output = ModelOutput()
    with redirect_stdout(output):
        yield output


__all__ = ["MAX_LINE", "MAX_LINES", "PREFIX", "ModelOutput", "captured_stdout"]
