"""What the user's own Python prints while gradexplain runs it, kept off stdout.

stdout is gradexplain's alone: `walk --format json` must parse and `report` without `-o` must
be the page. A Python model's code (at import, in its factory, forward or hooks) may print;
`captured_stdout` collects that for the whole time the user's code can run, bounded in size (a
forward printing in a loop cannot fill the memory), and `ModelOutput.lines` gives it back as
`model output: ...` lines for the command line to show on stderr. Torch-free.

`captured_output` (what the command line uses) takes more: the user's `sys.stderr` writes,
shown escaped like the prints (a model's `\x1b[2J` must not clear the terminal), and what
reaches file descriptor 1 itself (`os.write(1, ...)`, `sys.__stdout__`, a subprocess, C code),
spooled to a temporary file while the user's code runs and shown after what Python printed.
File descriptor 2 is left as it is: the progress bar and gradexplain's own warnings use it,
so text written to it directly (not through `sys.stderr`) is not escaped. Once the user's code
is done, a thread it left running may still print: from then on `sys.stdout` and `sys.stderr`
take text from gradexplain's own thread alone (`_OursAlone`).
"""

from __future__ import annotations

import codecs
import io
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from typing import IO, TextIO, cast

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

    def new_line(self) -> None:
        """End an unfinished line: what is written next starts a line of its own."""
        if self.partial:
            self.write("\n")

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


# gradexplain's own stderr while `captured_output` holds sys.stderr for the user's code: the
# command line's warnings and messages go there, not among the model's lines.
_outside: list[TextIO] = []


# The process whose output the command's is (`own_output`): a copy a model's code forked off
# (`os.fork()` at import) runs on through gradexplain's code too, and must not write a second.
_owner = {"pid": 0}


def own_output() -> None:
    """From now on this process writes the output (`cli.entry`; a rank, `run_rank`, which
    gradexplain forked itself and gives its own descriptors)."""
    _owner["pid"] = os.getpid()


def forked_off() -> None:
    """Leave at once, writing nothing, in a process a model's code forked off the command's."""
    if _owner["pid"] and os.getpid() != _owner["pid"]:
        os._exit(0)


def our_stderr() -> TextIO:
    """The stderr gradexplain itself writes to, even while the user's code runs."""
    return _outside[-1] if _outside else sys.stderr


@contextmanager
def captured_output() -> Iterator[ModelOutput]:
    """Within the block, the user's stdout (Python's and file descriptor 1) and `sys.stderr`
    go to the ModelOutput yielded; the file descriptor's text is added when the block ends,
    however it ends."""
    output = ModelOutput()
    _outside.append(sys.stderr)
    # In place before the user's code runs, so that they are what is put back, at once: a
    # thread it started may print while the streams are being put back.
    sys.stdout, sys.stderr = _ours_alone(sys.stdout), _ours_alone(sys.stderr)
    try:
        with _descriptor_captured(1, output), redirect_stdout(output), redirect_stderr(output):
            yield output
    finally:
        _outside.pop()


class _OursAlone:
    """`sys.stdout` (or `sys.stderr`) once the user's code is done: what the thread that ran
    the walk writes goes through; what a thread the user's code started writes (a logger still
    printing) goes nowhere, or it would land inside the JSON or the page written next, raw."""

    def __init__(self, stream: TextIO, thread: int) -> None:
        self._stream = stream
        self._thread = thread

    def write(self, text: str) -> int:
        if threading.get_ident() != self._thread:
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _ours_alone(stream: TextIO) -> TextIO:
    if isinstance(stream, _OursAlone):
        return cast(TextIO, stream)
    return cast(TextIO, _OursAlone(stream, threading.get_ident()))


@contextmanager
def _descriptor_captured(descriptor: int, output: ModelOutput) -> Iterator[None]:
    """Within the block, file descriptor `descriptor` writes to a temporary file, read into
    `output` when the block ends (a file, not a pipe: nothing has to read it while the user's
    code runs, and a subprocess the user left running cannot block us). The descriptor is put
    back however the block ends. Python's buffers are flushed at both ends, so that our text
    written before stays ours and the user's written within (an unflushed
    `sys.__stdout__.write`) is caught."""
    with tempfile.TemporaryFile() as spool:
        _flush_python_stdout()
        saved = os.dup(descriptor)
        try:
            os.dup2(spool.fileno(), descriptor)
            try:
                yield
            finally:
                _flush_python_stdout()
                os.dup2(saved, descriptor)
        finally:
            os.close(saved)
            output.new_line()
            _read_into(spool, output)


def _flush_python_stdout() -> None:
    for stream in (sys.stdout, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed by the user, or a reader gone: nothing to keep
            pass


# The spool is read this much at a time: a subprocess may have written gigabytes, and only
# MAX_LINES lines are kept (the rest are counted without being kept).
_CHUNK = 1 << 16


def _read_into(spool: IO[bytes], output: ModelOutput) -> None:
    spool.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")
    while chunk := spool.read(_CHUNK):
        output.write(decoder.decode(chunk))
    output.write(decoder.decode(b"", final=True))


__all__ = ["MAX_LINE", "MAX_LINES", "PREFIX", "ModelOutput", "captured_output", "captured_stdout",
           "forked_off", "our_stderr", "own_output"]
