"""JSON written as it is made: a document whose big arrays (a pass's events, the runs) are
made one item at a time, each encoded by Python's C encoder and dropped as soon as it is
written, so neither the whole dict tree nor the whole text is ever in memory at once.

A document is plain JSON data, except that a `Fields` (a dict) is written key by key and an
`Items` (an iterable, consumed once) item by item; everything else is encoded whole, so these
two may stand only as the document or inside each other, never inside a plain dict or list.
`json_chunks` writes a document compact (no whitespace: `{"a":[1,2]}`) or, with `pretty`, as
`json.dumps(..., indent=1)` lays it out; `built` makes the same document as plain dicts and
lists (the Python API's `json()`). Either way the text parses to the same data: only the
whitespace differs. No torch, no rich here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

# The C encoder runs only when a document is encoded in one go without `indent` (json's
# `iterencode` and every indented encode are pure Python, ~3x slower): each item is one go.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_PRETTY = json.JSONEncoder(ensure_ascii=False, indent=1)


class Fields(dict[str, Any]):
    """A JSON object written key by key: its values may be `Fields` or `Items` themselves."""


class Items:
    """A JSON array whose items are made as it is written (`items` is consumed once)."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items


def json_chunks(document: Any, pretty: bool = False) -> Iterator[str]:
    """The JSON text of `document`, then a newline, in pieces as they are made."""
    yield from _chunks(document, pretty, 0)
    yield "\n"


def json_text(document: Any, pretty: bool = False) -> str:
    """The JSON text of `document` whole (for what is small: a diff, a test)."""
    return "".join(json_chunks(document, pretty))


def _chunks(value: Any, pretty: bool, level: int) -> Iterator[str]:
    if isinstance(value, Fields):
        pairs = ((_COMPACT.encode(key) + (": " if pretty else ":"), item)
                 for key, item in value.items())
        yield from _members("{", "}", pairs, pretty, level)
    elif isinstance(value, Items):
        yield from _members("[", "]", (("", item) for item in value.items), pretty, level)
    elif pretty:
        # An indented value's lines after its first, shifted to its depth (a JSON string
        # holds no raw newline: every newline is layout).
        text = _PRETTY.encode(value)
        yield text.replace("\n", "\n" + " " * level) if level else text
    else:
        yield _COMPACT.encode(value)


def _members(opening: str, closing: str, members: Iterable[tuple[str, Any]], pretty: bool,
             level: int) -> Iterator[str]:
    """An object's or array's members, each `(prefix, value)` (a key and its colon, or
    nothing), between its brackets; `[]` or `{}` when it has none, as json.dumps writes."""
    separator = ",\n" + " " * (level + 1) if pretty else ","
    first = True
    for prefix, value in members:
        yield (opening + ("\n" + " " * (level + 1) if pretty else "")) if first else separator
        first = False
        yield prefix
        yield from _chunks(value, pretty, level + 1)
    if first:
        yield opening + closing
    else:
        yield ("\n" + " " * level if pretty else "") + closing


def built(value: Any) -> Any:
    """The document as plain dicts and lists, nothing shared with what it was made from."""
    if isinstance(value, dict):
        return {key: built(item) for key, item in value.items()}
    if isinstance(value, Items):
        return [built(item) for item in value.items]
    if isinstance(value, list):
        return [built(item) for item in value]
    return value


def batched(chunks: Iterable[str], size: int = 1 << 18) -> Iterator[str]:
    """Chunks joined into pieces of about `size` characters: a write per piece, not per
    number."""
    pending: list[str] = []
    length = 0
    for chunk in chunks:
        pending.append(chunk)
        length += len(chunk)
        if length >= size:
            yield "".join(pending)
            pending.clear()
            length = 0
    if pending:
        yield "".join(pending)


__all__ = ["Fields", "Items", "batched", "built", "json_chunks", "json_text"]
