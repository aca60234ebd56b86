"""A read head over a parsed Document: typed reads that fail with the place and what was expected.

The schema reader is written in terms of these reads (`cursor.mapping(...)`, `.integer()`,
`.text()`), so every "expected X, got Y" message has the same shape and the same location rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import NoReturn, TypeVar

from gradexplain.errors import (
    Location,
    SpecError,
    SpecSchemaError,
    quoted,
    show_number,
    the_number,
)
from gradexplain.language.catalogue import did_you_mean
from gradexplain.language.expr import LARGEST_NUMBER
from gradexplain.language.yamlio import Document, KeyPath


def describe(value: object) -> str:
    """How a YAML value reads in an error message."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return the_number(value)
    text = str(value)
    return f"the text {text[:40]!r}" + ("..." if len(text) > 40 else "") + _e_notation(text)


# A number in e-notation as people write it (1e300, 2E-3, .5e+3) that YAML 1.1 reads as text: it
# takes e-notation as a number only with a dot in the mantissa and a sign on the exponent.
_E_NOTATION = re.compile(r"([-+]?)([0-9]*)(\.?)([0-9]*)[eE]([-+]?)([0-9]+)")


def _e_notation(text: str) -> str:
    found = _E_NOTATION.fullmatch(text.strip())
    if found is None or not (found[2] or found[4]):
        return ""
    sign, whole, _, fraction, exponent_sign, exponent = found.groups()
    mantissa = f"{whole or '0'}.{fraction or '0'}"
    written = f"{sign}{mantissa}e{exponent_sign or '+'}{exponent}"
    return (f" (YAML reads e-notation as a number only with a dot and a signed exponent: "
            f"write {written})")


Choice = TypeVar("Choice", bound=str)


class Cursor:
    """One value of the document and the path that leads to it."""

    def __init__(self, doc: Document, path: KeyPath, value: object) -> None:
        self.doc = doc
        self.path = path
        self.value = value

    @property
    def key(self) -> str:
        last = self.path[-1] if self.path else ""
        return str(last)

    def where(self) -> Location:
        return self.doc.where(self.path)

    def where_key(self) -> Location:
        return self.doc.where_key(self.path)

    def fail(self, message: str, error: type[SpecError] = SpecSchemaError) -> NoReturn:
        raise error(message, self.where())

    def expected(self, what: str) -> NoReturn:
        self.fail(f"expected {what}, got {describe(self.value)}")

    def child(self, key: str | int, value: object) -> Cursor:
        return Cursor(self.doc, (*self.path, key), value)

    def mapping(
        self, allowed: Sequence[str], required: Sequence[str] = (), what: str = "a mapping"
    ) -> dict[str, Cursor]:
        """The entries of a mapping whose keys must come from `allowed`."""
        if not isinstance(self.value, dict):
            self.expected(what)
        for key in self.value:
            if key not in allowed:
                place = self.doc.where_key((*self.path, key))
                choices = (f"allowed here: {', '.join(allowed)}" if allowed
                           else "no key is allowed here")
                raise SpecSchemaError(
                    f"unknown key {quoted(key)}{did_you_mean(key, allowed)} ({choices})",
                    place,
                )
        for key in required:
            if key not in self.value:
                self.fail(f"missing the key {key!r}")
        return {key: self.child(key, value) for key, value in self.value.items()}

    def entries(self, what: str) -> list[tuple[str, Cursor]]:
        """The entries of a mapping with free keys (names chosen by the user)."""
        if self.value is None:
            return []
        if not isinstance(self.value, dict):
            self.expected(what)
        return [(key, self.child(key, value)) for key, value in self.value.items()]

    def items(self, what: str) -> list[Cursor]:
        if self.value is None:
            return []
        if not isinstance(self.value, list):
            self.expected(what)
        return [self.child(i, value) for i, value in enumerate(self.value)]

    def text(self, what: str = "text") -> str:
        if not isinstance(self.value, str):
            self.expected(what)
        return self.value

    def line(self, what: str) -> str:
        """Text with no newline in it (`what` heads outputs, and one line of a summary).
        Every other line break is shown as its escape (`safe_text`), as in any text."""
        text = self.text(what)
        if "\n" in text:
            self.fail(f"{what} is one line of text: it heads every output, so a newline in "
                      f"it would start a line of its own there; got {text.count(chr(10)) + 1} "
                      "lines")
        return text

    def choice(self, what: str, kind: str, choices: Sequence[Choice], note: str = "") -> Choice:
        """Text that must be one of `choices` (`what` it is expected to be otherwise); an
        unknown one is named as an unknown `kind`, with the nearest choice and all of them."""
        text = self.text(what)
        for choice in choices:
            if text == choice:
                return choice
        self.fail(f"unknown {kind} {quoted(text)}{did_you_mean(text, choices)} "
                  f"(one of {', '.join(choices)}{note})")

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            self.expected("true or false")
        return self.value

    def integer(self, low: int | None = None, high: int | None = None) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            self.expected("a whole number")
        if low is not None and self.value < low:
            self.fail(f"expected a whole number >= {low}, got {show_number(self.value)}")
        if high is not None and self.value > high:
            self.fail(f"expected a whole number <= {high:,}, got {show_number(self.value)}")
        return self.value

    def number(self) -> float:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            self.expected("a number")
        if isinstance(self.value, float) and not math.isfinite(self.value):
            self.fail(f"expected a finite number, got {self.value}")
        if abs(self.value) > LARGEST_NUMBER:
            self.fail(f"{the_number(self.value)} is too large: numbers in a spec are "
                      "at most 3.4e38 in size, the largest a float32 tensor holds")
        return float(self.value)
