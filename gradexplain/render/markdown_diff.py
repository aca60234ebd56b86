"""`diff --format markdown` and the report's diff section: each module's legacy and full hook
calls as a table, the reasons as bullets, the verdict in bold. Returns a string."""

from __future__ import annotations

from gradexplain.records.diff import UNNAMED_ARGUMENT, ArgRow, CallDiff, HookDiff, ModuleDiff
from gradexplain.records.numbers import shape_label
from gradexplain.records.paths import module_title
from gradexplain.records.walk import LabelledArg
from gradexplain.render.diff_headings import call_headings
from gradexplain.render.markdown import blocks, bold, bullets, code, escape, heading, math, table
from gradexplain.render.marks import check_cell, value_cell


def diff_markdown(diff: HookDiff, level: int = 1) -> str:
    """The whole diff; with `level` 1 it is a page of its own, deeper inside a report."""
    parts = []
    if level == 1:
        parts += [heading(1, f"Legacy vs full backward hooks: {escape(diff.name)}"),
                  f"{code(diff.spec)}, torch {code(diff.torch)}"]
    parts.append(escape("register_backward_hook (legacy) beside register_full_backward_hook "
                        "(full), module by module. ≠ marks an argument that differs."))
    if diff.graph_changed:
        parts.append(f"{bold('Note:')} {escape(diff.graph_changed)}")
    parts += [module_markdown(module, level + 1) for module in diff.modules]
    return blocks(*parts)


def module_markdown(module: ModuleDiff, level: int) -> str:
    arguments = ", ".join(code(name) if name else UNNAMED_ARGUMENT for name in module.arguments)
    about = f"Arguments: {arguments or 'none'}."
    if module.last_node:
        about += f" The legacy hook sits on {code(module.last_node)}."
    parts = [heading(level, code(module_title(module.module))), about]
    for call in module.calls:
        parts.append(_call(module, call))
    findings = module.findings()
    if findings:
        parts.append(bullets([prose(finding.text) for finding in findings]))
    parts.append(f"{bold('Verdict:')} {prose(module.verdict)}")
    return blocks(*parts)


def _call(module: ModuleDiff, call: CallDiff) -> str:
    title, legacy, full = call_headings(module, call)
    title = title.capitalize()
    rows = [[code(row.name), _side(row.legacy, call.legacy_seq is None),
             _side(row.full, call.full_seq is None), _mark(row), escape(row.note)]
            for row in call.rows]
    return blocks(bold(title), table(["argument", legacy, full, "", "why they differ"], rows))


def _side(arg: LabelledArg | None, silent: bool) -> str:
    if arg is None:
        return "did not fire" if silent else "(no such entry)"
    if arg.value is None:
        return "None"
    label = math(arg.meaning.latex) if arg.meaning else "(not labelled)"
    check = check_cell(arg.check, arg.not_checked)
    return (f"{label}<br>{shape_label(arg.value)}: {value_cell(arg.value)}"
            f"{' ' + check if check else ''}")


def _mark(row: ArgRow) -> str:
    return "=" if row.same else "≠"


def prose(text: str) -> str:
    """Our own sentences: `backticked` parts become code spans, the rest is escaped."""
    pieces = text.split("`")
    if len(pieces) % 2 == 0:  # an unpaired backtick: keep it all literal
        return escape(text)
    return "".join(code(piece) if index % 2 else escape(piece)
                   for index, piece in enumerate(pieces))
