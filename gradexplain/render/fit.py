"""Laying text out in a given width without breaking what must stay whole: a tensor's value
(never a matrix row across lines), a sentence (only between words), and a row of columns whose
check mark stays on the value's last line.

Pure string functions, no rich and no torch, so every renderer can share them: the timeline's
argument rows use them, and any view that prints values beside labels can. What they promise:

- `value_lines(value, width)`: the value as `fmt_value` shows it, on one line when it fits;
  else one innermost row per line (numpy's layout: `[[1, 2],` / ` [3, 4]]`); else, when a row
  alone is wider than `width` (a long vector), the shape-and-summary form, broken only between
  its pieces (`[32, 256] min 0 max 1` / `mean 0.5 norm 65`). No line is wider than `width`
  unless one piece alone is (a 0-d value never is).
- `word_lines(text, width, hang)`: a sentence broken between words, never inside a bracketed
  group (`[4, 2]`, `(10, 3, 2)`) nor leaving a check mark alone; a word wider than `width` is
  cut; continuation lines indented by `hang`.
- `name_lines(name, width)`: a dotted name (`encoder.0.weight.grad =`) broken after a dot or at
  a space; a part wider than `width` is cut.
- `pack(pieces, width)`: pieces (names, list items) joined by spaces, broken only between them.
- `shortened(values, room)`: a value on one line of `room` characters, whole items or rows
  left out as `…` (the diff's cells).
- `row_lines(cells, widths)`: columns side by side, each cell a list of lines padded to its
  column's width, two spaces apart; a column of width 0 takes no room.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from gradexplain.records.numbers import TEXT_ELEMENTS, fmt_nested, fmt_value, summary_parts
from gradexplain.records.trace import Nested, TensorValue

GAP = 2  # spaces between two columns
MARKS = ("✓", "✗")
NUMERIC_TUPLE = re.compile(r"\(-?\d+(?:\.\d+)?,")
# A dotted name's parts: each with the dot that ends it, a last part, a run of spaces.
_NAME_PARTS = re.compile(r"\s+|[^\s.]*\.|[^\s.]+")


def value_lines(value: TensorValue | None, width: int, whole: str | None = None) -> list[str]:
    """A value laid out in `width` columns (see the module docstring); `whole`, its
    `fmt_value` when the caller has it already."""
    if value is None:
        return ["None"]
    whole = fmt_value(value) if whole is None else whole
    if len(whole) <= width:
        return [whole]
    shown_in_full = value.value is not None and math.prod(value.shape) <= TEXT_ELEMENTS
    if shown_in_full and isinstance(value.value, list) and len(value.shape) >= 2:
        rows = _nested_lines(value.value)
        if all(len(row) <= width for row in rows):
            return rows
    return pack(summary_parts(value), width)


def word_lines(text: str, width: int, hang: int = 0) -> list[str]:
    """`text` broken between words (`words`) into lines of at most `width` characters, lines
    after the first indented by `hang` (none when the width is too narrow for it)."""
    width = max(width, 1)
    hang = hang if width > 2 * hang else 0
    room = max(width - hang, 1)
    pieces: list[str] = []
    for word in words(text):
        # A word wider than a whole line is cut: the only way to keep the width.
        pieces += [word] if len(word) <= room else [word[at:at + room]
                                                    for at in range(0, len(word), room)]
    return pack(pieces, width, " " * hang) if pieces else [""]


def name_lines(name: str, width: int) -> list[str]:
    """`name` in lines of at most `width` characters (see the module docstring)."""
    width = max(width, 1)
    lines = [""]
    for part in _NAME_PARTS.findall(name):
        if part.isspace():
            part = "" if not lines[-1] else " "  # no line starts with a space
        while part:
            room = width - len(lines[-1])
            if len(part) <= room:
                lines[-1] += part
                part = ""
            elif lines[-1] and (part == " " or len(part) <= width):
                lines.append("")
                part = part.strip()
            else:
                # Wider than a whole line: cut, the only way to keep the width.
                lines[-1] += part[:room]
                part = part[room:]
                lines.append("")
    return [line.rstrip() for line in lines if line.strip()] or [""]


def words(text: str) -> list[str]:
    """`text` split between words, a bracketed group (`[4, 2]`, `(10, 3, 2)`) kept as one
    word and a check mark joined to the word beside it, so that no line breaks inside a
    row of numbers or leaves a mark alone."""
    merged: list[str] = []
    depth = 0
    for word in text.split():
        if depth > 0 and merged:
            merged[-1] += " " + word
        else:
            merged.append(word)
        depth = max(0, depth + _opened(word, depth))
    glued: list[str] = []
    for word in merged:
        if glued and glued[-1] in MARKS:
            glued[-1] += " " + word  # a leading mark goes with the word after it
        elif word in MARKS and glued:
            glued[-1] += " " + word  # a trailing mark with the word before it
        else:
            glued.append(word)
    return glued


def _opened(word: str, depth: int) -> int:
    """How many groups `word` leaves open: square brackets always; parentheses only around
    numbers (a shape such as `(10, 3, 2)`), since a parenthesised remark may wrap."""
    opened = word.count("[") - word.count("]")
    if NUMERIC_TUPLE.match(word) or depth > 0:
        opened += word.count("(") - word.count(")")
    return opened



def row_lines(cells: Sequence[Sequence[str]], widths: Sequence[int]) -> list[str]:
    """Cells side by side: line i holds line i of every cell, each padded to its column's
    width; columns of width 0 are left out, and trailing spaces are dropped."""
    used = [(cell, width) for cell, width in zip(cells, widths, strict=True) if width > 0]
    height = max((len(cell) for cell, _ in used), default=0)
    lines = []
    for index in range(height):
        parts = [(cell[index] if index < len(cell) else "").ljust(width) for cell, width in used]
        lines.append((" " * GAP).join(parts).rstrip())
    return lines


def shortened(value: Nested, room: int) -> str:
    """`[1, 2, 3, …, 9]`: as many leading items as fit, then `…` and the last one; else the
    first item alone and `…`, itself shortened the same way. Rows of a matrix are kept whole
    where they fit, and never split across lines."""
    text = fmt_nested(value)
    if len(text) <= room or not isinstance(value, list) or not value:
        return text
    last = fmt_nested(value[-1])
    for head in range(len(value) - 2, 0, -1):
        shown = "[" + ", ".join([*(fmt_nested(item) for item in value[:head]), "…", last]) + "]"
        if len(shown) <= room:
            return shown
    if len(value) == 1:
        return "[" + shortened(value[0], room - 2) + "]"
    return "[" + shortened(value[0], room - len("[, …]")) + ", …]"


def _nested_lines(value: Nested) -> list[str]:
    """A nested list with one innermost row per line, each level indented by its bracket."""
    if not isinstance(value, list) or not value or not isinstance(value[0], list):
        return [fmt_nested(value)]
    lines: list[str] = []
    for index, item in enumerate(value):
        block = _nested_lines(item)
        if index < len(value) - 1:
            block[-1] += ","
        lines += block
    lines = ["[" + lines[0], *(" " + line for line in lines[1:])]
    lines[-1] += "]"
    return lines


def pack(pieces: Sequence[str], width: int, indent: str = "") -> list[str]:
    """Pieces joined by spaces, a new line started wherever the next piece would not fit
    (a piece never breaks: a list of names wraps between names); lines after the first start
    with `indent`, within the width."""
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append(indent + piece if lines else piece)
    return lines


__all__ = ["GAP", "MARKS", "name_lines", "pack", "row_lines", "shortened", "value_lines",
           "word_lines", "words"]
