"""`diff --format text`: each module's legacy and full backward hook calls side by side, the
reasons they differ, and a verdict. Returns rich renderables; `cli.py` prints them."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradexplain.records.diff import ArgRow, CallDiff, HookDiff, ModuleDiff
from gradexplain.records.numbers import fmt_value, shape_label
from gradexplain.records.paths import module_title
from gradexplain.records.walk import LabelledArg
from gradexplain.render.diff_headings import call_headings
from gradexplain.render.marks import check_mark


def diff_text(diff: HookDiff) -> RenderableType:
    parts: list[RenderableType] = [
        Text.assemble((diff.name, "bold"), f"  {diff.spec}  (torch {diff.torch})"),
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
    arguments = ", ".join(name or "(not a tensor)" for name in module.arguments)
    head.append(f"  arguments: {arguments or 'none'}")
    if module.last_node:
        head.append(f"; legacy hook on {module.last_node}")
    parts: list[RenderableType] = [head]
    for call in module.calls:
        parts.append(Padding(_call(module, call), (0, 0, 0, 2)))
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


def _call(module: ModuleDiff, call: CallDiff) -> RenderableType:
    title, legacy, full = call_headings(module, call)
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), show_edge=False,
                  title=title, title_justify="left", title_style="bold")
    table.add_column("argument", no_wrap=True)
    table.add_column(legacy, ratio=3)
    table.add_column(full, ratio=3)
    table.add_column("", no_wrap=True)
    table.add_column("why they differ", ratio=3)
    for row in call.rows:
        table.add_row(row.name, _side(row.legacy, call.legacy_seq is None),
                      _side(row.full, call.full_seq is None), _mark(row), row.note)
    return table


def _side(arg: LabelledArg | None, silent: bool) -> Text:
    if arg is None:
        return Text("did not fire" if silent else "(no such entry)", style="dim")
    if arg.value is None:
        return Text("None")
    text = Text(arg.meaning.text if arg.meaning else "(not labelled)")
    shape = shape_label(arg.value)
    text.append(f"\n{shape}: {fmt_value(arg.value)} ")
    text.append_text(check_mark(arg.check, arg.not_checked))
    return text


def _mark(row: ArgRow) -> Text:
    return Text("=", style="green") if row.same else Text("≠", style="bold yellow")
