"""Reading a spec file's bytes: within the size bound, as UTF-8, and when that cannot be done,
one line that says why in words to act on (the file does not exist, is a folder, is not
readable), never as a YAML error, since no YAML was read yet. Parsing is yamlio's.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from gradexplain.errors import Location, SpecFileError, SpecLimitError, SpecSyntaxError
from gradexplain.language.yamlio import Document, parse_document

MAX_FILE_BYTES = 1_000_000


def read_document(path: Path, display_name: str | None = None) -> Document:
    """Read and parse `path`. Every failure is a SpecError naming the file and the place."""
    name = display_name or str(path)
    return parse_document(read_text(path, name), name)


def read_text(path: Path, name: str) -> str:
    """A spec file's text, read once within the size bound; a SpecError if it cannot be."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise _unreadable(exc, path, name) from None
    if path.is_dir():
        raise SpecFileError("is a folder, not a spec file: give one of the YAML files in it",
                            Location(name))
    if size > MAX_FILE_BYTES:
        raise SpecLimitError(
            f"the file is {size:,} bytes; a spec may be at most {MAX_FILE_BYTES:,} bytes "
            "(write large tensors as randn, rand, zeros or ones instead of literals)",
            Location(name),
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _unreadable(exc, path, name) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecSyntaxError(
            f"the file is not UTF-8 text (byte {exc.start} cannot be decoded)", Location(name)
        ) from None
    return text


def _unreadable(exc: OSError, path: Path, file: str) -> SpecFileError:
    """Why the file cannot be read, in words that say what to fix."""
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return SpecFileError(f"the file does not exist{_similar_file(path)}", Location(file))
    if isinstance(exc, PermissionError):
        return SpecFileError("the spec file cannot be read: permission denied (check its "
                             "permissions)", Location(file))
    return SpecFileError(f"the spec file cannot be read: {exc.strerror or exc}", Location(file))


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
