"""The calls a spec makes after its forward, in order: each backward or autograd.grad call with
every leaf's `.grad` before and after it (accumulation, zeroing, autograd.grad leaving `.grad`
alone), and the errors torch raised, explained. Text (rich) and markdown; no torch here.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradexplain.errors import first_line_of
from gradexplain.records.lessons.torch_errors import ErrorExplanation
from gradexplain.records.numbers import fmt_value
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import LeafGrad, RunStep, Walk
from gradexplain.render.fit import GAP, row_lines, value_lines
from gradexplain.render.lessons.layout import Fitted, indented, labelled, prose
from gradexplain.render.markdown import blocks, bold, bullets, code, escape, heading, table
from gradexplain.render.marks import check_cell, check_mark


def worth_showing(walk: Walk) -> bool:
    """One plain backward says nothing the final `.grad`s do not: show the calls when there are
    several, or torch refused one."""
    return len(walk.runs) > 1 or any(step.error is not None for step in walk.runs)


def call_title(step: RunStep) -> str:
    """The call as Python: `y.backward(gradient=[100, 0.1], retain_graph=True)`."""
    if step.kind == "backward":
        function, args = f"{step.of}.backward", []
        if step.seed is not None:
            args.append(f"gradient={fmt_value(step.seed)}")
    else:
        wrt = step.wrt[0] if len(step.wrt) == 1 else f"[{', '.join(step.wrt)}]"
        function, args = "torch.autograd.grad", [step.of, wrt]
        if step.seed is not None:
            args.append(f"grad_outputs={fmt_value(step.seed)}")
    if step.retain_graph:
        args.append("retain_graph=True")
    return f"{function}({', '.join(args)})"


def error_verdict(step: RunStep) -> str:
    assert step.error is not None
    if step.error.expected:
        return f"torch raised {step.error.category}, as the spec expected ✓"
    if step.expect_error is not None:
        return (f"✗ torch raised {step.error.category}, but its message does not contain "
                f"{step.expect_error!r}, which the spec expects")
    return f"✗ torch raised {step.error.category}, which the spec did not expect"




def accumulation_note(step: RunStep) -> str:
    """What happens to `.grad` in this call, in words."""
    if step.error is not None:
        return ".grad as torch left it after the error"
    if step.kind == "grad":
        return (f"autograd.grad returns its result and accumulates nothing: every .grad is as "
                f"before, and {step.post_accumulate} post-accumulate-grad hooks fired")
    start = "after zero_grad, " if step.zeroed else ""
    return (f"{start}backward adds its gradient to every .grad it reaches "
            f"({step.post_accumulate} post-accumulate-grad hook call(s) show the sum)")


# --- text ------------------------------------------------------------------------------------

BODY = 6  # where a call's notes and leaves start, under its call


def runs_text(walk: Walk) -> RenderableType:
    parts: list[RenderableType] = [Text("calls, in order, with every leaf's .grad around them",
                                        style="bold underline")]
    for step in walk.runs:
        parts.append(_step_text(step))
    parts.append(Text(""))
    return Group(*parts)


def _step_text(step: RunStep) -> RenderableType:
    parts: list[RenderableType] = [Fitted(lambda width: _head_lines(step, width))]
    body: list[RenderableType] = []
    if step.error is not None:
        style = "green" if step.error.expected else "bold red"
        body.append(_prose(error_verdict(step), style))
        body.append(_prose(f"torch: {first_line_of(step.error.message)}"))
        if step.explanation is not None:
            body.append(_explanation_text(step.explanation))
    body.append(_prose(accumulation_note(step), "dim italic"))
    body.append(Fitted(lambda width: _leaf_lines(step.leaves, width)))
    parts.append(Padding(Group(*body), (0, 0, 0, BODY)))
    return Group(*parts)


def _prose(text: str, style: str = "") -> Fitted:
    return Fitted(lambda width: prose(text, width, style))


def _head_lines(step: RunStep, width: int) -> list[Text]:
    """`run 2  fn(arg, gradient=v, retain_graph=True)  (every .grad zeroed first)`: the call on
    one line when it fits, else broken between its arguments, each under the first; a value
    too wide for a line keeps its matrix rows whole."""
    prefix = f"run {step.run}  "
    function, args = _call_parts(step)
    zeroed = "  (every .grad zeroed first)" if step.zeroed else ""
    plain = [prefix + call_title(step)]
    if len(plain[0]) > width:
        opening = prefix + function + "("
        at = len(opening) if len(opening) <= width // 2 else BODY
        plain = [opening.rstrip("(") + "(" if at == len(opening) else opening]
        for number, (label, value) in enumerate(args):
            end = ")" if number == len(args) - 1 else ","
            shown = label + ("" if value is None else fmt_value(value)) + end
            if number == 0 and at == len(opening) and len(plain[-1]) + len(shown) <= width:
                plain[-1] += shown
            elif len(plain[-1]) + 1 + len(shown) <= width and number > 0:
                plain[-1] += " " + shown
            elif value is None:
                plain.append(" " * at + shown)
            else:
                plain += indented(labelled(label, value, end, width - at), at)
    if zeroed and len(plain[-1]) + len(zeroed) <= width:
        plain[-1] += zeroed
    elif zeroed:
        plain.append(" " * BODY + zeroed.strip())
    lines = [Text(line, style="bold") for line in plain]
    lines[0].stylize("not bold dim", 0, len(prefix))
    if zeroed:
        lines[-1].stylize("not bold dim", len(plain[-1]) - len(zeroed.strip()))
    return lines


def _call_parts(step: RunStep) -> tuple[str, list[tuple[str, TensorValue | None]]]:
    """The call's function and its arguments as (text, value), as call_title writes them."""
    args: list[tuple[str, TensorValue | None]]
    if step.kind == "backward":
        function, args = f"{step.of}.backward", []
        if step.seed is not None:
            args.append(("gradient=", step.seed))
    else:
        wrt = step.wrt[0] if len(step.wrt) == 1 else f"[{', '.join(step.wrt)}]"
        function, args = "torch.autograd.grad", [(step.of, None), (wrt, None)]
        if step.seed is not None:
            args.append(("grad_outputs=", step.seed))
    if step.retain_graph:
        args.append(("retain_graph=True", None))
    return function, args


def _leaf_lines(leaves: Sequence[LeafGrad], width: int) -> list[Text]:
    """`name.grad  before + added = after  ✓`, one leaf a row: names in one column, marks in
    another, each on its value's last line; a change too wide for one line shows its matrices
    side by side, one row per line, or else one under the other."""
    if not leaves:
        return []
    name_width = max(len(f"{leaf.name}.grad") for leaf in leaves)
    marks = [check_mark(leaf.check) for leaf in leaves]
    mark_width = max(len(mark) for mark in marks)
    room = width - name_width - GAP - (GAP + mark_width if mark_width else 0)
    changes = [_change_lines(leaf, max(room, 1)) for leaf in leaves]
    change_width = max(len(line) for lines in changes for line in lines)
    lines: list[Text] = []
    for leaf, change, mark in zip(leaves, changes, marks, strict=True):
        rows = row_lines([[f"{leaf.name}.grad"], change], [name_width, change_width])
        texts = [Text(row) for row in rows]
        if mark:
            texts[-1].append(" " * (name_width + GAP + change_width + GAP - len(rows[-1])))
            texts[-1].append_text(mark)
        lines += texts
    return lines


def _change_lines(leaf: LeafGrad, width: int) -> list[str]:
    """`before + added = after` (see _change) in `width`: one line; or the three values side by
    side, one matrix row per line; or each value under the one before, `+`/`=` leading it."""
    one_line = _change(leaf)
    if len(one_line) <= width:
        return [one_line]
    if leaf.added is None or leaf.before is None:
        value = leaf.after
        note = "" if leaf.added is None and not leaf.check else (
            " (unchanged)" if leaf.added is None else " (was None: this call's gradient)")
        return labelled("", value, note, width)
    side_by_side = [value_lines(value, width) for value in (leaf.before, leaf.added, leaf.after)]
    columns = [side_by_side[0], ["+"], side_by_side[1], ["="], side_by_side[2]]
    sizes = [max(len(line) for line in column) for column in columns]
    if sum(sizes) + GAP * (len(sizes) - 1) <= width:
        return row_lines(columns, sizes)
    lines = value_lines(leaf.before, width)
    for operator, value in (("+ ", leaf.added), ("= ", leaf.after)):
        lines += labelled(operator, value, "", width)
    return lines


def _change(leaf: LeafGrad) -> str:
    """`before + added = after`, shortened where one side says nothing."""
    if leaf.added is None:
        return f"{fmt_value(leaf.after)} (unchanged)" if leaf.check else fmt_value(leaf.after)
    if leaf.before is None:
        return f"{fmt_value(leaf.after)} (was None: this call's gradient)"
    return f"{fmt_value(leaf.before)} + {fmt_value(leaf.added)} = {fmt_value(leaf.after)}"


def _explanation_text(explanation: ErrorExplanation) -> RenderableType:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(max_width=86)
    grid.add_row("what:", explanation.what)
    grid.add_row("why:", explanation.why)
    grid.add_row("fix:", explanation.fix)
    return grid


# --- markdown --------------------------------------------------------------------------------


def runs_markdown(walk: Walk, level: int, headed: bool = True) -> str:
    """A heading at `level` (unless the caller has one), then per call: its title, torch's error
    explained, and a table of every leaf's `.grad` before, added, after."""
    parts = [heading(level, "Calls in order") if headed else "",
             "Each backward or `torch.autograd.grad` call of the spec, in the order it ran. "
             "Backward adds to `.grad` (a leaf's `.grad` after = before + what this call "
             "computes, checked); `autograd.grad` returns its result and leaves `.grad` alone."]
    for step in walk.runs:
        parts.append(_step_markdown(step))
    return blocks(*parts)


def _step_markdown(step: RunStep) -> str:
    title = f"{bold(f'Run {step.run}')}: {code(call_title(step))}"
    if step.zeroed:
        title += " (every `.grad` zeroed first)"
    parts = [title]
    if step.error is not None:
        items = [escape(error_verdict(step)), f"torch: {code(first_line_of(step.error.message))}"]
        if step.explanation is not None:
            items += [f"{bold('What')}: {escape(step.explanation.what)}",
                      f"{bold('Why')}: {escape(step.explanation.why)}",
                      f"{bold('Fix')}: {escape(step.explanation.fix)}"]
        parts.append(bullets(items))
    parts.append(escape(accumulation_note(step), block=True))
    rows = [[code(f"{leaf.name}.grad"), code(fmt_value(leaf.before)),
             "" if leaf.added is None else code(fmt_value(leaf.added)),
             code(fmt_value(leaf.after)),
             check_cell(leaf.check)]
            for leaf in step.leaves]
    if rows:
        parts.append(table(("leaf", "before", "added by this call", "after", "check"), rows))
    return blocks(*parts)


__all__ = ["call_title", "runs_markdown", "runs_text", "worth_showing"]
