"""A saved session's JSON text parsed within bounds, so hostile text gets a clear refusal with its
key path, never Python's own limits: nesting deeper than a session ever is (json's C parser
recurses, and so does the codec), integers longer than any count or index (Python refuses to
parse more than 4,300 digits, and nothing needs more than a few dozen). A lone UTF-16
surrogate (JSON's `\\ud800`) is kept: a model's `extra_repr` can hold one, `--save` writes it so,
and every output shows it escaped (safe_text). No torch here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

# A session nests about ten levels (session.walk.passes[0].events[3].args[1].value.value) plus
# one per tensor dimension; 64 leaves room for 50-dimensional tensors and refuses hostile text
# long before the parser's recursion limit.
MAX_DEPTH = 64
# The longest integer a session holds is a count or an index; 30 digits is more than any.
MAX_DIGITS = 30

KeyPath = tuple[str | int, ...]

# A string, or an unclosed one running to the end of the text. The pattern must match wherever a
# quote stands, on its first try: were an unclosed string a failed match, the search would try
# again from every quote inside it, a time quadratic in its length ("a\"a\"..., 30 KB took
# 12 s). Each character can be matched one way only, so the one try is linear too.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_EMPTY_PAIR = re.compile(r"\[\]|\{\}")


class JsonTextError(ValueError):
    """Text that cannot be a session: `path` says where in the document, when it is known."""

    def __init__(self, message: str, path: KeyPath = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


class _LongNumber:
    """An integer too long to read, kept only as its length until its key path is known."""

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))


def parse(text: str) -> Any:
    """The JSON document in `text`; JsonTextError for what no session can hold.
    json.JSONDecodeError (not JSON at all) goes through to the caller."""
    if too_deep(text, MAX_DEPTH):
        raise JsonTextError(f"nested more than {MAX_DEPTH} levels deep (a saved session nests "
                            "about a dozen)")
    long_numbers: list[int] = []

    def integer(digits: str) -> int | _LongNumber:
        if len(digits.lstrip("-")) > MAX_DIGITS:
            long_numbers.append(len(digits))
            return _LongNumber(digits)
        return int(digits)

    try:
        document = json.loads(text, parse_int=integer)
    except RecursionError as error:  # a backstop: the scan above refuses such text first
        raise JsonTextError(f"nested more than {MAX_DEPTH} levels deep") from error
    if long_numbers:
        # Only then the walk that finds the key path: it costs more than the parse.
        _refuse_long_numbers(document)
    return document


def _refuse_long_numbers(document: Any) -> None:
    for path, item in _scalars(document):
        if isinstance(item, _LongNumber):
            raise JsonTextError(f"a number of {item.digits:,} digits; a session's numbers have "
                                f"at most {MAX_DIGITS}", path)


def too_deep(text: str, limit: int) -> bool:
    """Whether the brackets of `text` nest deeper than `limit`: strings dropped (an unclosed one
    with the rest of the text), then the innermost pairs removed `limit` times over (each pass
    one regular-expression sweep). Unbalanced text is left for the parser to refuse, unless it
    is deep already."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        if not brackets:
            return False
        shorter = _EMPTY_PAIR.sub("", brackets)
        if len(shorter) == len(brackets):
            # Nothing left to pair: unbalanced. Deep if the opening run alone is.
            return len(shorter) - len(shorter.lstrip("[{")) > limit
        brackets = shorter
    return bool(brackets)


def _scalars(document: Any) -> Iterator[tuple[KeyPath, Any]]:
    """Every value and mapping key of the document with its key path, without recursion."""
    stack: list[tuple[KeyPath, Any]] = [((), document)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                yield (*path, key), key
                stack.append(((*path, key), value))
        elif isinstance(item, list):
            stack.extend(((*path, index), value) for index, value in enumerate(item))
        else:
            yield path, item
