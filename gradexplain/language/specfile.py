"""Reading a spec file's bytes: within the size bound, as UTF-8, and when that cannot be done,
one line that says why in words to act on (the file does not exist, is a folder, is not
readable), never as a YAML error, since no YAML was read yet. Parsing is yamlio's.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from gradexplain.errors import (
    Location,
    SpecError,
    SpecFileError,
    SpecLimitError,
    SpecSyntaxError,
)
from gradexplain.files import UnreadableFile, read_regular
from gradexplain.language.yamlio import Document, parse_document

MAX_FILE_BYTES = 1_000_000


def read_document(path: Path, display_name: str | None = None) -> Document:
    """Read and parse `path`. Every failure is a SpecError naming the file and the place."""
    name = display_name or str(path)
    return parse_document(read_text(path, name), name)


def read_text(path: Path, name: str) -> str:
    """A spec file's text, read once within the size bound; a SpecError if it cannot be.
    Only a regular file is read (`files.read_regular`): a FIFO or a device is refused at once."""
    try:
        raw = read_regular(path, MAX_FILE_BYTES, name)
    except UnreadableFile as problem:
        raise _unreadable(problem, path, name) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecSyntaxError(
            f"the file is not UTF-8 text (byte {exc.start} cannot be decoded)", Location(name)
        ) from None
    return text


def _unreadable(problem: UnreadableFile, path: Path, file: str) -> SpecError:
    """Why the file cannot be read, in words that say what to fix."""
    where = Location(file)
    if problem.kind == "missing" and not path.is_symlink():
        return SpecFileError(f"the file does not exist{_similar_file(path)}", where)
    if problem.kind == "folder":
        return SpecFileError("is a folder, not a spec file: give one of the YAML files in it",
                             where)
    if problem.kind == "too large":
        return SpecLimitError(
            f"the file is {_size(problem.size)}; a spec may be at most "
            f"{MAX_FILE_BYTES:,} bytes (write large "
            "tensors as randn, rand, zeros or ones instead of literals)", where)
    if problem.kind == "not regular":
        return SpecFileError(f"{problem.reason.removesuffix('give a file')}give a spec file",
                             where)
    return SpecFileError(f"the spec file {problem.reason}", where)


def _size(size: int | None) -> str:
    return f"over {MAX_FILE_BYTES:,} bytes" if size is None else f"{size:,} bytes"


def _similar_file(path: Path) -> str:
    """`; did you mean specs/two_modules.yaml?` for a near miss in the same folder."""
    try:
        siblings = {item.stem: item.name for item in path.parent.iterdir()
                    if item.is_file() and item.suffix == path.suffix}
    except OSError:
        return ""
    # Stems, not names: the shared `.yaml` would make any two names look alike.
    close = difflib.get_close_matches(path.stem, list(siblings), n=1, cutoff=0.7)
    return f"; did you mean {path.parent / siblings[close[0]]}?" if close else ""
