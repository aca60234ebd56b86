"""How text leaves the program: stdout, stderr and the files written. Everything the CLI says
passes through `echo`, `show` or `write`, so no control character of the user's reaches the
terminal (`safe_text`), a full disk is one line (OutputError, exit 2), a reader that went away
ends the output quietly, stdout gets every byte (`_write_whole`) and its escape for a character
its encoding cannot hold, and a file is written whole or not at all (`files.write_atomic`).
Part of the CLI edge (`cli.py` decides what to say; this module only says it).
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import select
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gradexplain.errors import OutputError, UsageError
from gradexplain.safe_text import safe_text
from gradexplain.user_output import MAX_LINE, forked_off, our_stderr

if TYPE_CHECKING:
    from rich.console import RenderableType

    from gradexplain.render.outputs import Output


def write(path: Path, text: str | Iterable[str]) -> None:
    """Write an output file atomically, whole or in pieces as they are made: on failure the
    old file keeps its bytes."""
    from gradexplain.files import write_atomic

    forked_off()
    try:
        write_atomic(path, safe_text(text) if isinstance(text, str)
                     else map(safe_text, text))
    except (OSError, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise UsageError(f"cannot write {path}: {reason}") from error


def _emit(text: str, nl: bool = True, unencodable: str = "backslashreplace") -> bool:
    """Text on stdout, whole; whether it was written. A reader that went away (`| head -1`)
    ends the output quietly: stdout goes to /dev/null and the command finishes with its own
    exit code. Any other failure (a full disk) is one line, exit 2. Either way nothing is left
    in Python's buffer to fail again, noisily, at exit. A character stdout's encoding cannot
    hold (`∂` on a Latin-1 terminal) is written as its escape, by the codec error handler
    `unencodable`."""
    forked_off()
    try:
        _write_whole(text + "\n" if nl else text, unencodable)
    except OSError as error:
        failure = stdout_failure(error)
        if failure is not None:
            raise failure from error
        return False
    return True


def _write_whole(text: str, unencodable: str) -> None:
    """All of `text` on stdout, or an OSError. Written as bytes, and written again from where
    a write stopped: over an unbuffered stdout (PYTHONUNBUFFERED=1, `python -u`) a text stream
    drops what a partial write left over, and a write to a full pipe is partial when the
    process is stopped and continued (Ctrl-Z then `fg`, a frozen container) while its reader
    lags. A non-blocking stdout (the flag belongs to the pipe, shared with whoever else holds
    it) is waited on until it takes more."""
    stream = sys.stdout
    binary = getattr(stream, "buffer", None)
    if binary is None:  # a text stream alone (a StringIO): it takes the text whole
        stream.write(text)
        stream.flush()
        return
    stream.flush()  # what went out as text goes first
    if os.linesep != "\n":
        text = text.replace("\n", os.linesep)
    data = memoryview(text.encode(_encoding(stream), unencodable))
    while data:
        try:
            written = binary.write(data)
        except BlockingIOError as full:
            written = full.characters_written
        if not written:  # None or 0: a non-blocking stdout that is full
            _wait_writable(binary)
        data = data[written or 0:]
    while True:
        try:
            binary.flush()
            return
        except BlockingIOError:
            _wait_writable(binary)


def _encoding(stream: object) -> str:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    # click's rule, which `typer.echo` followed here before: a stdout left at ASCII (a bare C
    # locale) is misconfigured more often than it is an ASCII terminal, and is given UTF-8.
    return "utf-8" if codecs.lookup(encoding).name == "ascii" else encoding


def _wait_writable(binary: object) -> None:
    """Until the non-blocking stdout `binary` can take more."""
    fileno = getattr(binary, "fileno", None)
    if fileno is None:
        raise OSError(errno.EAGAIN, "stdout takes no more and cannot be waited on")
    select.select([], [fileno()], [])


def _json_escape(error: UnicodeError) -> tuple[str, int]:
    """A codec error handler: each character the encoding cannot hold as JSON's escape
    (`\\u2202`; a pair of surrogates past U+FFFF). JSON is ASCII outside its strings, so every
    such character is in a string, where the escape means that character."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    escapes = []
    for character in error.object[error.start:error.end]:
        code = ord(character)
        if code > 0xFFFF:
            code -= 0x10000
            escapes.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            escapes.append(f"\\u{code:04x}")
    return "".join(escapes), error.end


JSON_ESCAPES = "gradexplain-json"
codecs.register_error(JSON_ESCAPES, _json_escape)


def stdout_failure(error: OSError) -> OutputError | None:
    """What a failed write to stdout is: None when the reader went away (the output ends
    quietly), else one line to say. stdout goes to /dev/null either way."""
    _drop_stdout()
    if isinstance(error, BrokenPipeError):
        return None
    return OutputError(f"cannot write the output (stdout): {error.strerror or error}")


def failed_on_stdout(error: OSError) -> bool:
    """Whether `error` came from a write to stdout that did not pass through `_emit`: typer's
    own `--help` writes to sys.stdout itself. Told by the innermost frame (click's echo)
    holding the stream it wrote to, for want of anything in the OSError that names it."""
    traceback = error.__traceback__
    if traceback is None:
        return False
    while traceback.tb_next is not None:
        traceback = traceback.tb_next
    return any(_is_stdout(value) for value in traceback.tb_frame.f_locals.values())


def _is_stdout(value: object) -> bool:
    if value is sys.stdout:
        return True
    if not isinstance(value, io.IOBase):
        return False
    try:  # a wrapper click made around stdout's buffer
        return value.fileno() == sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return False


def _drop_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def show(output: Output) -> None:
    """A rendered output on stdout: text as it is, pieces of text as they are made (JSON), a
    rich renderable laid out (`_show_rich`); the cycle collector paused meanwhile."""
    from gradexplain.collector import collector_paused

    with collector_paused():
        if isinstance(output, str):
            echo(output, nl=False)
        elif isinstance(output, Iterator):
            _show_pieces(output)
        else:
            _show_rich(output)


def _show_pieces(pieces: Iterator[str]) -> None:
    """Each piece as it comes, escaped (`safe_text` escapes character by character, so the
    pieces escaped are the text escaped); the rest is not made once the reader went away."""
    from gradexplain.render.json_stream import batched

    for text in batched(pieces):
        if not _emit(safe_text(text), nl=False, unencodable=JSON_ESCAPES):
            return


def _show_rich(renderable: RenderableType) -> None:
    from gradexplain.render.console import plain_text, safe_print, terminal_console

    if sys.stdout.isatty():
        # Laid out and coloured for the terminal, then written as every output is (`_emit`):
        # rich's own write would fail on a character the terminal's encoding cannot hold.
        console = terminal_console()
        with console.capture() as captured:
            safe_print(console, renderable)
        _emit(captured.get(), nl=False)
        return

    # Piped or redirected: 100 columns, no colour, no trailing padding on any line.
    echo(plain_text(renderable))


def echo(text: str, *, nl: bool = True, err: bool = False, one_line: bool = False) -> None:
    """Text out on stdout or (`err`) stderr: every output passes here or `write`, so no
    control character of the user's reaches the terminal (`safe_text`); a `one_line` message
    has its newlines escaped too. stdout goes through `_emit` (a closed pipe, a full disk)."""
    forked_off()
    if err:
        # gradexplain's stderr, also while the user's code has sys.stderr (a warning then).
        # A stderr that takes nothing (a model closed file descriptor 2) is not a failure of
        # the command: what it had to say is lost, its exit code still says it.
        with suppress(OSError, ValueError):
            typer.echo(safe_text(text, one_line=one_line), nl=nl, file=our_stderr())
    else:
        _emit(safe_text(text, one_line=one_line), nl=nl)


# A warning is cut to this many lines, each as long as a line of the model's own output: a
# model can warn with a megabyte of text.
WARNING_LINES = 6


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: object = None, line: str | None = None) -> None:
    """`warnings.showwarning` at the CLI edge: Python's own two lines (where, and the source
    line), escaped and cut to WARNING_LINES lines of MAX_LINE characters, on stderr. Without
    it a model's `warnings.warn` would reach the terminal raw, escape sequences and all."""
    lines = warnings.formatwarning(message, category, filename, lineno, line).splitlines()
    for shown in lines[:WARNING_LINES]:
        if len(shown) > MAX_LINE:
            shown = shown[:MAX_LINE] + f"... ({len(shown):,} characters)"
        echo(shown, err=True)
    if len(lines) > WARNING_LINES:
        echo(f"... {len(lines) - WARNING_LINES:,} more line(s) of that warning not shown", err=True)


__all__ = ["echo", "failed_on_stdout", "show", "show_warning", "stdout_failure", "write"]
