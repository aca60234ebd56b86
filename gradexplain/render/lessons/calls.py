"""The calls a spec makes after its forward, in order: each backward or autograd.grad call with
every leaf's `.grad` before and after it (accumulation, zeroing, autograd.grad leaving `.grad`
alone), and the errors torch raised, explained. Text (rich) and markdown; no torch here.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradexplain.errors import first_line_of
from gradexplain.records.lessons.torch_errors import ErrorExplanation
from gradexplain.records.numbers import fmt_value
from gradexplain.records.walk import LeafGrad, RunStep, Walk
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


def runs_text(walk: Walk) -> RenderableType:
    parts: list[RenderableType] = [Text("calls, in order, with every leaf's .grad around them",
                                        style="bold underline")]
    for step in walk.runs:
        parts.append(_step_text(step))
    parts.append(Text(""))
    return Group(*parts)


def _step_text(step: RunStep) -> RenderableType:
    head = Text.assemble((f"run {step.run}  ", "dim"), (call_title(step), "bold"))
    if step.zeroed:
        head.append("  (every .grad zeroed first)", style="dim")
    parts: list[RenderableType] = [head]
    if step.error is not None:
        style = "green" if step.error.expected else "bold red"
        parts.append(Padding(Text(error_verdict(step), style=style), (0, 0, 0, 6)))
        parts.append(Padding(Text(f"torch: {first_line_of(step.error.message)}"), (0, 0, 0, 6)))
        if step.explanation is not None:
            parts.append(Padding(_explanation_text(step.explanation), (0, 0, 0, 6)))
    parts.append(Padding(Text(accumulation_note(step), style="dim italic"), (0, 0, 0, 6)))
    grid = Table.grid(padding=(0, 1))
    for leaf in step.leaves:
        grid.add_row(f"{leaf.name}.grad", Text(_change(leaf)), check_mark(leaf.check))
    parts.append(Padding(grid, (0, 0, 0, 6)))
    return Group(*parts)


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
