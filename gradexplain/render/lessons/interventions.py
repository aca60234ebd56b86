"""The intervention lesson (hooks that return a replacement gradient), as text and as markdown.

No torch here. Both renderers say the same things in the same words: which hook replaced what
with what (before and after, and what each replaced gradient is the gradient of), every gradient
without and with the hook and whether it changed, the check of each leaf gradient against the
run without the hook plus the vector-Jacobian product of the replacement's change, the rule in
plain words, and for a replacement torch refuses, torch's message and the rule it broke. The
sentences are built once, here, as plain text; the text renderer styles them and the markdown
renderer escapes them. Numbers go through `fmt` and `fmt_value`.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from gradexplain.records.lessons.interventions import GradChange, InterventionLesson
from gradexplain.records.numbers import fmt, fmt_value
from gradexplain.render.lessons.layout import Cell, Column, Fitted, Shown, prose, table_lines
from gradexplain.render.markdown import blocks, bold, bullets, code, escape, heading, table

TITLE = "Interventions: hooks that return a replacement gradient"
SUBTITLE = ("each intervention runs the spec's backward on two identical builds, without and with "
            "its hook; the walk's passes have none, so their labels keep their derivative meaning")
HOOK_CALLS = {
    "backward": "register_backward_hook",
    "full_backward": "register_full_backward_hook",
    "full_backward_pre": "register_full_backward_pre_hook",
    "tensor": "Tensor.register_hook",
}
REPLACED_HEADERS = ("call", "argument", "gradient of", "torch passed", "the hook returned")
CHANGE_HEADERS = ("gradient", "without the hook", "with the hook", "", "check")


def intervention_text(lessons: Sequence[InterventionLesson]) -> RenderableType:
    """Every intervention lesson as rich renderables (an empty Group when the spec has none)."""
    if not lessons:
        return Group()
    parts: list[RenderableType] = [Text(TITLE, style="bold underline"),
                                   _prose(SUBTITLE, "dim"), Text("")]
    for number, lesson in enumerate(lessons, 1):
        parts += [_lesson_text(number, lesson), Text("")]
    return Group(*parts)


def intervention_markdown(lessons: Sequence[InterventionLesson], level: int) -> str:
    """Every intervention lesson as GitHub markdown: a section with its heading at `level`, one
    subsection per intervention; "" when the spec has none."""
    if not lessons:
        return ""
    parts = [heading(level, escape(TITLE)), escape(SUBTITLE[:1].upper() + SUBTITLE[1:],
                                                   block=True) + "."]
    for number, lesson in enumerate(lessons, 1):
        parts.append(_lesson_markdown(number, lesson, level + 1))
    return blocks(*parts)


# --- the sentences, shared by both renderers ---------------------------------------------------


def title(lesson: InterventionLesson) -> str:
    """`register_full_backward_hook on model: normalize: divide every gradient ...`."""
    return f"{HOOK_CALLS[lesson.hook]} on {_target(lesson)}, {lesson.describe}"


def run_sentence(lesson: InterventionLesson) -> str:
    """Which differentiation both runs make, and where the hook sits."""
    if not lesson.call:
        return lesson.rule
    sentence = f"{lesson.call}, once without the hook and once with it"
    target = _target(lesson)
    if lesson.hook == "tensor":
        return sentence + f"; the hook is on the tensor {target}"
    if lesson.node is None:
        return sentence
    if lesson.hook == "backward":
        where = f"the grad_fn of {target}'s first output"
    else:
        side = "outputs" if lesson.hook == "full_backward_pre" else "inputs"
        where = f"the identity node a full hook wraps around {target}'s {side}"
    return sentence + f"; the hook runs on {lesson.node}, {where}"


def _target(lesson: InterventionLesson) -> str:
    return lesson.target or "the top-level model"


def error_verdict(lesson: InterventionLesson) -> str:
    if lesson.expected_error:
        return "torch refused the replacement, as the spec expected ✓"
    if lesson.expect_error is not None:
        return (f"✗ torch refused the replacement, but its message does not contain "
                f"{lesson.expect_error!r}")
    return "✗ torch refused the replacement, which the spec did not expect"


def check_sentence(lesson: InterventionLesson) -> str:
    """The verdict over every checked gradient."""
    checked = [change for change in lesson.changes if change.verified is not None]
    if lesson.verified is None or not checked:
        return "nothing to check: no leaf gradient could be compared"
    what = ("every leaf .grad" if any(change.kind == "leaf" for change in checked)
            else "every autograd.grad result")
    prediction = ("the run without the hook plus the vector-Jacobian product of the "
                  "replacement's change, in a hook-free build")
    if lesson.verified:
        return (f"✓ {what} with the hook equals {prediction} (max abs error "
                f"{fmt(lesson.max_abs_err)})")
    failed = ", ".join(row_name(change) for change in lesson.failed_checks)
    return (f"✗ FAILED: {failed} with the hook differs from {prediction} (max abs error "
            f"{fmt(lesson.max_abs_err)})")


def row_name(change: GradChange) -> str:
    """`x1.grad` for a leaf, `autograd.grad for x` for a result, `y = module2.x` for a tensor."""
    if change.kind == "leaf":
        return f"{change.name}.grad"
    if change.kind == "result":
        return f"autograd.grad for {change.name}"
    if change.aliases:
        return f"{change.name} = {', '.join(change.aliases)}"
    return change.name


def change_mark(change: GradChange) -> str:
    return "changed" if change.changed else "="


def check_mark(change: GradChange) -> str:
    if change.verified is None:
        return ""
    if change.verified:
        return "✓"
    return f"✗ FAILED (error {fmt(change.max_abs_err if change.max_abs_err is not None else 0)})"


def _replaced_rows(lesson: InterventionLesson) -> list[tuple[str, str, str, str, str]]:
    return [(fmt(item.call), item.argument, item.flows_into, fmt_value(item.before),
             fmt_value(item.after)) for item in lesson.replaced]


# --- text --------------------------------------------------------------------------------------


def _lesson_text(number: int, lesson: InterventionLesson) -> RenderableType:
    heading_ = f"{number}. {title(lesson)}"

    def head(width: int) -> list[Text]:
        lines = prose(heading_, width, "bold", hang=3)
        lines[0].stylize("not bold dim", 0, len(f"{number}. "))
        return lines

    body: list[RenderableType] = [_prose(run_sentence(lesson), "dim italic")]
    if lesson.replaced:
        body.append(Text("what the hook replaced", style="underline"))
        rows: list[list[Cell]] = [
            [call, argument, flows, Shown(item.before), Shown(item.after)]
                for (call, argument, flows, _, _), item in zip(_replaced_rows(lesson),
                                                               lesson.replaced, strict=True)]
        columns = [Column(header) for header in REPLACED_HEADERS]
        body.append(Fitted(lambda width: table_lines(columns, rows, width)))
    elif lesson.call:
        body.append(Text("the hook never fired: nothing was replaced"))
    if lesson.error is not None:
        style = "green" if lesson.expected_error else "bold red"
        body.append(_prose(error_verdict(lesson), style))
        body.append(_prose(f"torch: {lesson.error}"))
        if lesson.error_rule is not None:
            body.append(_prose(f"rule: {lesson.error_rule}"))
    if lesson.changes:
        body.append(Text("every gradient without and with the hook", style="underline"))
        body.append(Fitted(lambda width: _changes_lines(lesson, width)))
        style = "green" if lesson.verified else ("bold red" if lesson.verified is False
                                                 else "dim")
        body.append(_prose(check_sentence(lesson), style))
        body.append(_prose(f"rule: {lesson.rule}"))
    for warning in lesson.warnings:
        body.append(_prose(f"torch warned: {warning}", "yellow"))
    return Group(Fitted(head), Padding(Group(*body), (0, 0, 0, 3)))


def _prose(text: str, style: str = "") -> Fitted:
    return Fitted(lambda width: prose(text, width, style))


def _changes_lines(lesson: InterventionLesson, width: int) -> list[Text]:
    """The table of every gradient without and with the hook, each value's rows kept whole and
    its check mark on the value's last line."""
    columns = [Column(header, at_end=header == "check") for header in CHANGE_HEADERS]
    rows: list[list[Cell]] = [
        [row_name(change), Shown(change.without), Shown(change.with_),
         Text(change_mark(change), style="bold" if change.changed else "dim"),
         Text(check_mark(change), style="green" if change.verified else "bold red")]
        for change in lesson.changes]
    return table_lines(columns, rows, width)


# --- markdown ----------------------------------------------------------------------------------


def _lesson_markdown(number: int, lesson: InterventionLesson, level: int) -> str:
    parts = [heading(level, f"{number}. {escape(title(lesson))}"),
             escape(run_sentence(lesson), block=True) + "."]
    if lesson.replaced:
        rows = [[escape(call), code(argument), code(flows), code(before), code(after)]
                for call, argument, flows, before, after in _replaced_rows(lesson)]
        parts += [bold("What the hook replaced"),
                  table(REPLACED_HEADERS, rows, ("right", None, None, None, None))]
    elif lesson.call:
        parts.append("The hook never fired: nothing was replaced.")
    if lesson.error is not None:
        items = [escape(error_verdict(lesson)), f"torch: {code(lesson.error)}"]
        if lesson.error_rule is not None:
            items.append(f"{bold('Rule')}: {escape(lesson.error_rule)}")
        parts.append(bullets(items))
    if lesson.changes:
        rows = [[code(row_name(change)), code(fmt_value(change.without)),
                 code(fmt_value(change.with_)),
                 bold("changed") if change.changed else "=",
                 _check_markdown(change)]
                for change in lesson.changes]
        parts += [bold("Every gradient without and with the hook"),
                  table(("gradient", "without the hook", "with the hook", "changed", "check"),
                        rows),
                  escape(check_sentence(lesson), block=True),
                  f"{bold('Rule')}: {escape(lesson.rule)}"]
    if lesson.warnings:
        parts.append(bullets([f"torch warned: {escape(warning)}" for warning in lesson.warnings]))
    return blocks(*parts)


def _check_markdown(change: GradChange) -> str:
    if change.verified is False:
        error = change.max_abs_err if change.max_abs_err is not None else 0
        return f"✗ {bold('FAILED')} (error {escape(fmt(error))})"
    return check_mark(change)


__all__ = ["change_mark", "check_mark", "check_sentence", "error_verdict",
           "intervention_markdown", "intervention_text", "row_name", "run_sentence", "title"]
