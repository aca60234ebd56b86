"""`diff --format text`: each module's legacy and full backward hook calls side by side, the
reasons they differ, and a verdict. Returns rich renderables; `cli.py` prints them.

A call is laid out by hand, not as a rich table: a table sizes its columns to each module's
content, so columns moved from module to module, and a value wrapped under its label in a
narrow column ran 4-6 lines. Here the columns depend on the console width alone (the same for
every module of the diff), each argument is one line (`argument  legacy label ✓  full label ✓
=`), its values follow on one line each (shortened, never wrapped), and why the two differ is
full-width text under the row.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradexplain.records.diff import UNNAMED_ARGUMENT, ArgRow, CallDiff, HookDiff, ModuleDiff
from gradexplain.records.numbers import TEXT_ELEMENTS, fmt_shape, fmt_value
from gradexplain.records.paths import module_title
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import LabelledArg
from gradexplain.render.console import title_line
from gradexplain.render.diff_headings import call_headings
from gradexplain.render.fit import shortened, word_lines
from gradexplain.render.marks import check_mark

INDENT = 2
NAME_WIDTH = 15  # `grad_output[9]` and `run 1, call 2` fit
GAP = 2
# The table never grows past this, however wide the terminal: lines stay readable.
MOST = 120
NBSP = "\u00a0"  # keeps a check mark on its label's line when a label wraps


def diff_text(diff: HookDiff) -> RenderableType:
    parts: list[RenderableType] = [
        title_line(diff.name, diff.spec, diff.torch),
        Text("legacy register_backward_hook vs register_full_backward_hook, module by module",
             style="dim"),
        Text(""),
    ]
    if diff.graph_changed:
        parts += [Text(f"Note: {diff.graph_changed}", style="yellow"), Text("")]
    parts += [_module(module) for module in diff.modules]
    return Group(*parts)


def _module(module: ModuleDiff) -> RenderableType:
    head = Text.assemble((module_title(module.module), "bold cyan"))
    arguments = ", ".join(name or UNNAMED_ARGUMENT for name in module.arguments)
    head.append(f"  arguments: {arguments or 'none'}")
    if module.last_node:
        head.append(f"; legacy hook on {module.last_node}")
    parts: list[RenderableType] = [head]
    parts += [CallLines(module, call) for call in module.calls]
    findings = module.findings()
    if findings:
        parts.append(Padding(Text("why:", style="bold"), (0, 0, 0, 2)))
        bullets = Table.grid(padding=(0, 1, 0, 0))
        bullets.add_column(no_wrap=True)
        bullets.add_column()
        for finding in findings:
            bullets.add_row("•", finding.text)
        parts.append(Padding(bullets, (0, 0, 0, 4)))
    parts.append(Padding(Text.assemble(("verdict: ", "bold"), module.verdict), (0, 0, 0, 2)))
    parts.append(Text(""))
    return Group(*parts)


@dataclass(frozen=True)
class Columns:
    """Where each part of a row starts, from the width alone."""

    width: int

    @property
    def legacy(self) -> int:
        return INDENT + NAME_WIDTH + GAP

    @property
    def cell(self) -> int:
        """The width of a label cell: two of them, their gaps and the `=` fill the line."""
        return (self.width - self.legacy - 2 * GAP - 1) // 2

    @property
    def full(self) -> int:
        return self.legacy + self.cell + GAP

    @property
    def mark(self) -> int:
        return self.full + self.cell + GAP


class CallLines:
    """One call of a module: a heading line, then per argument its row line, its values and
    why the two differ."""

    def __init__(self, module: ModuleDiff, call: CallDiff) -> None:
        self.module = module
        self.call = call

    def __rich_console__(self, console: Console, options: ConsoleOptions
                         ) -> Iterator[Text]:
        yield from self.text_lines(options.max_width)

    def text_lines(self, width: int) -> Iterator[Text]:
        """The lines at `width`, for rich or `plain.py`."""
        columns = Columns(max(60, min(width, MOST)))
        title, legacy, full = call_headings(self.module, self.call)
        if not self.call.rows:  # why is among the findings below
            yield _line(columns, [(title, "bold"), ("neither hook fired", "dim"), ("", "")],
                        ("", ""))
            return
        yield _line(columns, [(title, "bold"), (legacy, "bold"), (full, "bold")], ("", ""))
        for row in self.call.rows:
            yield from _row(columns, row, self.call)


def _row(columns: Columns, row: ArgRow, call: CallDiff) -> Iterator[Text]:
    legacy = _cell(row.legacy, call.legacy_seq is None)
    full = _cell(row.full, call.full_seq is None)
    mark = ("=", "green") if row.same else ("≠", "bold yellow")
    yield from _wrapped_cells(columns, row.name, legacy, full, mark)
    yield from _values(columns, row)
    for side, arg in (("legacy", row.legacy), ("full", row.full)):
        problem = _check_problem(arg)
        if problem:
            yield from _prose(columns, f"{side} {problem}", "bold red"
                              if "FAILED" in problem else "yellow")
    if row.note:
        yield from _prose(columns, f"why ≠: {row.note}", "")


Cell = tuple[str, str]  # text (NBSP before a trailing mark), style


def _cell(arg: LabelledArg | None, silent: bool) -> Cell:
    if arg is None:
        return ("did not fire" if silent else "(no such entry)", "dim")
    if arg.value is None:
        return ("None", "")
    label = arg.meaning.text if arg.meaning else "(not labelled)"
    mark = check_mark(arg.check, arg.not_checked).plain
    if mark == "✓":
        return (f"{label}{NBSP}✓", "")
    if mark:  # the failure, or why it has no check, gets a line of its own
        return (f"{label}{NBSP}{'✗' if mark.startswith('✗') else '?'}", "")
    return (label, "")


def _check_problem(arg: LabelledArg | None) -> str:
    if arg is None or arg.value is None:
        return ""
    mark = check_mark(arg.check, arg.not_checked).plain
    if not mark or mark == "✓":
        return ""
    return f"check {mark}" if mark.startswith("✗") else mark


def _wrapped_cells(columns: Columns, name: str, legacy: Cell, full: Cell,
                   mark: Cell) -> Iterator[Text]:
    """The row line; a label longer than its cell goes on in its own column below."""
    left = _wrap(legacy[0], columns.cell)
    right = _wrap(full[0], columns.cell)
    for index in range(max(len(left), len(right))):
        cells = [(name if index == 0 else "", ""),
                 (left[index] if index < len(left) else "", legacy[1]),
                 (right[index] if index < len(right) else "", full[1])]
        yield _line(columns, cells, mark if index == 0 else ("", ""))


def _wrap(text: str, width: int) -> list[str]:
    lines = word_lines(text, width)
    return [line.replace(NBSP, " ") for line in lines]


def _line(columns: Columns, cells: list[Cell], mark: Cell) -> Text:
    line = Text(" " * INDENT)
    starts = [columns.legacy, columns.full, columns.mark]
    for (text, style), end in zip(cells, starts, strict=True):
        line.append(text, style=style or None)
        line.append(" " * max(1, end - len(line.plain)))
    line.append(mark[0], style=mark[1] or None)
    line.rstrip()
    line.highlight_words(["✓"], "green")
    line.highlight_words(["✗"], "bold red")
    line.no_wrap = True
    return line


def _values(columns: Columns, row: ArgRow) -> Iterator[Text]:
    """`both [2]: [..]` when the sides show the same numbers, else a line per side."""
    sides = [(side, arg.value) for side, arg in (("legacy", row.legacy), ("full", row.full))
             if arg is not None and arg.value is not None]
    if len(sides) == 2 and _shown(sides[0][1], 10**6) == _shown(sides[1][1], 10**6):
        sides = [("both", sides[0][1])]
    room = columns.width - columns.legacy
    tag = max((len(side) for side, _ in sides), default=0)
    for side, value in sides:
        shape = fmt_shape(value.shape) if value.shape else "scalar"
        head = f"{side:<{tag}} {shape}: "
        body = _shown(value, room - len(head))
        parts = word_lines(body, room - len(head))
        texts = [head + parts[0], *(" " * len(head) + part for part in parts[1:])]
        for index, text in enumerate(texts):
            line = Text(" " * columns.legacy + text)
            if index == 0:
                line.stylize("dim", columns.legacy, columns.legacy + len(head) - 1)
            line.no_wrap = True
            yield line


def _shown(value: TensorValue, room: int) -> str:
    """The values, shortened to `room` characters by leaving elements out (`…`), never by
    splitting a row; a summary as its statistics."""
    if value.value is not None and math.prod(value.shape) <= TEXT_ELEMENTS:
        return shortened(value.value, room)
    return fmt_value(value).removeprefix(fmt_shape(value.shape) + " ")


def _prose(columns: Columns, text: str, style: str) -> Iterator[Text]:
    """Sentences under a row: from the label column to the line's end, then the same indent."""
    room = columns.width - columns.legacy
    for part in word_lines(text, room, 2):
        line = Text(" " * columns.legacy)
        line.append(part, style=style or None)
        line.no_wrap = True
        yield line


__all__ = ["Columns", "diff_text"]
