"""Argument rows in columns that stay put: the timeline's `name  meaning  value  ✓` rows, laid
out by `fit.py` at the width they are printed at.

A pass's rows share one `Columns` (each column as wide as its widest cell in the whole pass), so
the columns do not shift from event to event; the value column takes what the width leaves, and
a meaning or name too wide for the line gives way to it (broken, a long word cut). A value keeps
its matrix rows whole (`fit.value_lines`), the mark sits on the value's last line, and a mark too
long for the line (a failure with its reason) gets a line of its own rather than being cut. Rich
renderables, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, RenderResult
from rich.control import strip_control_codes
from rich.style import Style
from rich.text import Text

from gradexplain.records.numbers import fmt_value
from gradexplain.records.trace import TensorValue
from gradexplain.render.fit import GAP, name_lines, row_lines, value_lines, word_lines

# A mark up to this long gets a column of its own (✓, `not checked`); longer ones (a failure
# with its reason) would widen every row of the pass, so they follow their value instead.
MARK_COLUMN = 12
# The meaning column's share of the room name and mark leave, at most (but never narrower than
# the longest word it holds, which would be cut): the value needs the room more.
MEANING_SHARE = 0.3
MIN_MEANING = 12
# The least room a value gets (or its widest one-line form, if narrower) before the meaning,
# then the name, gives way to it: a 100-character module name in a name or a meaning left the
# value no column at all. 40 lets a matrix row or a summary through, and is less than any
# example's value is left at 100 columns, so their layout stays as it was.
MIN_VALUE = 40
# A name column is never cut narrower than this (`grad_outputs[0]` and its mark fit).
MIN_NAME = 16


@dataclass(frozen=True)
class Row:
    """One argument: its name, what it means (styled as `meaning_style`), its value, its mark;
    `shown`, the value on one line (`fmt_value`), made once: the columns are measured by it
    and the row laid out with it, and a summary is a pass over every element."""

    name: str
    meaning: str
    value: TensorValue | None
    mark: Text
    meaning_style: str = ""
    shown: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown", fmt_value(self.value))


@dataclass(frozen=True)
class Columns:
    """The natural widths of a pass's columns: the widest name, meaning and short mark, the
    longest word of a meaning (the meaning column is never narrower) and the widest value on
    one line (the room values do not need goes to the meanings)."""

    name: int
    meaning: int
    mark: int
    word: int = 0
    value: int = 0

    @classmethod
    def of(cls, rows: Iterable[Row]) -> Columns:
        rows = list(rows)
        marks = [len(row.mark) for row in rows if len(row.mark) <= MARK_COLUMN]
        return cls(max((len(row.name) for row in rows), default=0),
                   max((len(row.meaning) for row in rows), default=0),
                   max(marks, default=0),
                   max((len(word) for row in rows for word in row.meaning.split()), default=0),
                   max((len(row.shown) for row in rows), default=0))

    def widths(self, width: int) -> tuple[int, int, int]:
        """(name, meaning, value) widths at a print width: the value takes what is left, at
        least MIN_VALUE of it while the meaning is wider than MIN_MEANING or the name than
        MIN_NAME (row_texts breaks them to fit), and one column whatever the width."""
        name = self.name
        room = width - name - GAP - (GAP + self.mark if self.mark else 0)
        needed = min(self.value, MIN_VALUE)
        meaning = 0
        if self.meaning:
            # The meaning gets its share, or all the room the widest value leaves, if more;
            # never narrower than its longest word, unless that would crowd the value out.
            share = max(int((room - GAP) * MEANING_SHARE), room - GAP - self.value)
            meaning = min(self.meaning, max(MIN_MEANING, self.word, share),
                          max(MIN_MEANING, room - GAP - needed))
        value = room - (GAP + meaning if meaning else 0)
        if value < needed and name > MIN_NAME:
            given = min(needed - value, name - MIN_NAME)
            name, value = name - given, value + given
        return name, meaning, max(value, 1)


@dataclass(frozen=True)
class Rows:
    """Rows laid out in the pass's columns when printed (at the console's width then)."""

    rows: tuple[Row, ...]
    columns: Columns

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.text_lines(options.max_width)

    def text_lines(self, width: int) -> Iterator[Text]:
        """The lines at `width`, styled, for rich."""
        for row in self.rows:
            yield from row_texts(row, self.columns, width)

    def plain_lines(self, width: int) -> Iterator[str]:
        """The same lines without their styles, for `plain.py` (no Text made)."""
        for row in self.rows:
            yield from _row_layout(row, self.columns, width)[0]


# A style over characters `start` to `end` of line `line`: (line, start, end, style).
Styled = tuple[int, int, int, str | Style]


def row_texts(row: Row, columns: Columns, width: int) -> list[Text]:
    """One row as lines of at most `width` characters (unless a single piece is wider)."""
    lines, styles = _row_layout(row, columns, width)
    texts = [Text(line) for line in lines]
    for line, start, end, style in styles:
        texts[line].stylize(style, start, end)
    return texts


def _row_layout(row: Row, columns: Columns, width: int) -> tuple[list[str], list[Styled]]:
    """`row_texts`'s lines as plain strings, and where their styles go."""
    name_width, meaning_width, value_width = columns.widths(width)
    # A name wider than its column (the column gave way to the value) is broken after its dots.
    name = [row.name] if len(row.name) <= name_width else name_lines(row.name, name_width)
    meaning = word_lines(row.meaning, meaning_width) if meaning_width else [""]
    value = value_lines(row.value, value_width, row.shown)
    # Without the control codes a rich Text drops from its characters, as it would.
    lines = [strip_control_codes(line) for line in
             row_lines([name, meaning, value], [name_width, meaning_width, value_width])]
    styles: list[Styled] = []
    if row.meaning_style and meaning_width:
        start = name_width + GAP
        styles += [(index, start, start + meaning_width, row.meaning_style)
                   for index in range(len(lines))]
    if not row.mark:
        return lines, styles
    mark_at = name_width + GAP + (meaning_width + GAP if meaning_width else 0) + value_width + GAP
    last = len(value) - 1
    if mark_at + len(row.mark) <= width:
        at = len(lines[last]) + max(1, mark_at - len(lines[last]))
        lines[last] = lines[last].ljust(at) + row.mark.plain
        styles += _mark_styles(row.mark, last, at)
    else:
        # Too long for the line: on lines of its own, under the value.
        indent = mark_at - value_width - GAP
        for line in word_lines(row.mark.plain, width - indent):
            lines.append(" " * indent + line)
            styles.append((len(lines) - 1, indent, indent + len(line), row.mark.style))
    return lines, styles


def _mark_styles(mark: Text, line: int, at: int) -> list[Styled]:
    """The mark's style and spans, for the mark placed at column `at` of `line`."""
    styles: list[Styled] = [(line, at, at + len(mark), mark.style)] if mark.style else []
    return styles + [(line, at + span.start, at + span.end, span.style) for span in mark.spans]


__all__ = ["Columns", "Row", "Rows", "row_texts"]
