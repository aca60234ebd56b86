"""How the text lessons lay out their lines at the width they are printed at, with the rules the
timeline and the chain rule follow (render/fit.py): a value on one line when it fits, else one
matrix row per line, else its shape and summary; a sentence broken only between words (never
inside a bracketed group such as `[4, 2]`), its continuation lines indented under it; a check
mark kept beside the word it belongs to, never alone on a line.

What fit.py does not have and the lessons need, kept here so that fit.py stays the timeline's:

- `Fitted`: a renderable whose lines are built when printed, at the console's width then (inside
  a `Padding`, the room the padding leaves), so the same lesson fits 80 or 120 columns.
- `prose(text, width)`: a sentence as lines, continuation lines indented by HANG.
- `labelled(head, value, tail, width)`: `head value tail` on one line, or the value's rows under
  each other, hanging under where the value starts.
- `table_lines(columns, rows, width)`: a table whose value cells keep their rows whole; the
  columns share the width, text columns giving way before values lose their rows.

Pure layout on rich Text, no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from gradexplain.records.numbers import fmt_value
from gradexplain.records.trace import TensorValue
from gradexplain.render.fit import GAP, row_lines, value_lines, word_lines, words

HANG = 2  # how far a sentence's continuation lines sit in from its first line
# A text column is not squeezed below this (or its longest word) while a value column could
# still give way: names and words read worse broken than a matrix shown one row per line.
TEXT_MIN = 16


@dataclass(frozen=True)
class Fitted:
    """Lines laid out when printed: `lay_out(width)` at the width the console leaves."""

    lay_out: Callable[[int], list[Text]]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.lay_out(options.max_width)


@dataclass(frozen=True)
class Shown:
    """A table cell holding a tensor value (laid out by fit.value_lines), not text."""

    value: TensorValue | None


Cell = str | Text | Shown


@dataclass(frozen=True)
class Column:
    """A table column: its header, and whether its cell sits on the row's last line (a check
    mark, beside the last row of the value it checks) rather than its first."""

    header: str
    at_end: bool = False


def prose(text: str, width: int, style: str = "", hang: int = HANG) -> list[Text]:
    """A sentence in lines of at most `width`, continuation lines indented by `hang`."""
    return [Text(line, style=style) for line in prose_lines(text, width, hang)]


def prose_lines(text: str, width: int, hang: int = HANG) -> list[str]:
    """A sentence as the lessons lay it out: fit.word_lines with their hanging indent."""
    return word_lines(text, width, hang)


def labelled(head: str, value: TensorValue | None, tail: str, width: int) -> list[str]:
    """`head value tail` on one line when it fits; else the value laid out by fit.value_lines
    with its first line after `head` and the others under it, `tail` after its last line where
    it fits, else below, under the value. A head taking more than half the line goes on lines
    of its own, the value under it indented by HANG."""
    one_line = head + fmt_value(value) + tail
    if len(one_line) <= width:
        return [one_line]
    if len(head) <= width // 2:
        at = len(head)
        rows = value_lines(value, width - at)
        lines = [head + rows[0], *(" " * at + row for row in rows[1:])]
    else:
        lines = prose_lines(head.rstrip(), width)
        at = HANG
        lines += [" " * at + row for row in value_lines(value, width - at)]
    # Padding that aligned a one-line tail means nothing after a matrix's last row.
    tail = "  " + tail.lstrip() if tail.startswith("  ") else tail
    if len(lines[-1]) + len(tail) <= width:
        lines[-1] += tail
    elif tail.strip():
        lines += [" " * at + line for line in prose_lines(tail.strip(" ,"), width - at)]
    return lines


def indented(lines: Sequence[str], indent: int) -> list[str]:
    return [" " * indent + line for line in lines]


# --- tables ------------------------------------------------------------------------------------


def table_lines(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int,
                header_style: str = "dim") -> list[Text]:
    """A header line and the rows, columns two spaces apart within `width` (see the module
    docstring); a cell's Text style colours its part of the row."""
    widths = _column_widths(columns, rows, width)
    headers = [_cell_lines(column.header, size) for column, size in zip(columns, widths,
                                                                         strict=True)]
    lines = [Text(line, style=header_style) for line in row_lines(headers, widths)]
    for row in rows:
        cells = [_cell_lines(cell, size) for cell, size in zip(row, widths, strict=True)]
        height = max(len(cell) for cell in cells)
        cells = [[""] * (height - len(cell)) + cell if column.at_end else cell
                 for column, cell in zip(columns, cells, strict=True)]
        lines += [_styled(line, row, widths) for line in row_lines(cells, widths)]
    return lines


def _column_widths(columns: Sequence[Column], rows: Sequence[Sequence[Cell]],
                   width: int) -> list[int]:
    """Each column as wide as its widest cell on one line; when that is too wide, the column
    with the most to give gives a character at a time: text down to TEXT_MIN and values down
    to their widest row, then text down to its longest word, then values to their summaries."""
    table = [[column.header, *(row[index] for row in rows)] for index, column in
             enumerate(columns)]
    natural = [max(_one_line_width(cell) for cell in cells) for cells in table]
    soft = [max(_soft_min(cell) for cell in cells) for cells in table]
    # A column whose cell sits on the row's last line (a mark) never wraps: it would leave its
    # first words above the line it belongs to.
    hard = [natural[index] if column.at_end else max(_hard_min(cell) for cell in table[index])
            for index, column in enumerate(columns)]
    soft = [max(size, floor) for size, floor in zip(soft, hard, strict=True)]
    values = [any(isinstance(cell, Shown) for cell in cells) for cells in table]
    # Text gives way first, to its longest word, before a value loses its rows.
    text_first = [h if not value else s for h, s, value in zip(hard, soft, values, strict=True)]
    sizes = list(natural)
    for floors in ([min(s, n) for s, n in zip(soft, natural, strict=True)],
                   [min(t, n) for t, n in zip(text_first, natural, strict=True)],
                   [min(h, n) for h, n in zip(hard, natural, strict=True)]):
        while sum(sizes) + GAP * (len(sizes) - 1) > width:
            slack = [size - floor for size, floor in zip(sizes, floors, strict=True)]
            widest = max(range(len(sizes)), key=lambda index: slack[index])
            if slack[widest] <= 0:
                break
            sizes[widest] -= 1
    return sizes


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell if isinstance(cell, str) else ""


def _one_line_width(cell: Cell) -> int:
    return len(fmt_value(cell.value)) if isinstance(cell, Shown) else len(_plain(cell))


def _soft_min(cell: Cell) -> int:
    if isinstance(cell, Shown):
        whole = len(fmt_value(cell.value))
        rows = value_lines(cell.value, max(whole - 1, 1))
        return max(len(row) for row in rows)
    return min(len(_plain(cell)), max(TEXT_MIN, _hard_min(cell)))


def _hard_min(cell: Cell) -> int:
    if isinstance(cell, Shown):
        return max(len(row) for row in value_lines(cell.value, 1))
    return max((len(word) for word in words(_plain(cell))), default=0)


def _cell_lines(cell: Cell, width: int) -> list[str]:
    if isinstance(cell, Shown):
        return value_lines(cell.value, width)
    return prose_lines(_plain(cell), width, hang=0) if _plain(cell) else [""]


def _styled(line: str, row: Sequence[Cell], widths: Sequence[int]) -> Text:
    text = Text(line)
    start = 0
    for cell, size in zip(row, widths, strict=True):
        if isinstance(cell, Text) and cell.style:
            text.stylize(cell.style, start, start + size)
        start += size + GAP
    return text


__all__ = ["HANG", "Cell", "Column", "Fitted", "Shown", "indented", "labelled", "prose",
           "prose_lines", "table_lines", "words"]
