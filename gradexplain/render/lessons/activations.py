"""The activations lesson (a spec's `captures:`, the CAM pattern), as text and as markdown.
No torch here.

Both say the same things in the same words: what the hook stored and why CAM wants it, one row
per forward call (did the hook fire, how many entries, the list's length after it, where
`handle.remove()` ran), what the forward after the removal shows, and every stored entry with
its check against the hook-free run. The sentences are built once, here, as plain text; the text
renderer styles them and the markdown renderer escapes them. Numbers go through `fmt` and
`fmt_value`.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from gradexplain.records.lessons.activations import ActivationLesson, ForwardCall, StoredEntry
from gradexplain.records.numbers import fmt, fmt_value
from gradexplain.render.lessons.layout import Cell, Column, Fitted, Shown, prose, table_lines
from gradexplain.render.markdown import blocks, bold, bullets, code, escape, heading, table

TITLE = "Forward-hook captures"
SUBTITLE = ("register_forward_hook appends a module's output to a list, as the hooks tutorial's "
            "save_feat does for class activation mapping (CAM)")
FORWARD_HEADERS = ("forward", "hook", "appended", "len({name}) after", "then")
ENTRY_HEADERS = ("entry", "from", "value", "check")


def activations_text(lessons: Sequence[ActivationLesson]) -> RenderableType:
    """Every capture lesson as rich renderables (an empty Group when the spec has none)."""
    if not lessons:
        return Group()
    parts: list[RenderableType] = [Text(TITLE, style="bold underline"),
                                   _prose(SUBTITLE, "dim"), Text("")]
    for lesson in lessons:
        parts += [_lesson_text(lesson), Text("")]
    return Group(*parts)


def activations_markdown(lessons: Sequence[ActivationLesson], level: int) -> str:
    """Every capture lesson as GitHub markdown: a section with its heading at `level`, one
    subsection per capture; "" when the spec has none."""
    if not lessons:
        return ""
    parts = [heading(level, TITLE), escape(SUBTITLE, block=True) + "."]
    for lesson in lessons:
        parts.append(_lesson_markdown(lesson, level + 1))
    return blocks(*parts)


# The sentences, shared by both renderers.

def title(lesson: ActivationLesson) -> str:
    """`save_feat = forward hook on net.conv1, handle.remove() after 1 forward`."""
    removal = ("never removed by the user" if lesson.remove_after is None
               else f"handle.remove() after {_count(lesson.remove_after, 'forward')}")
    return f"{lesson.name} = forward hook on {_module(lesson.module)}, {removal}"


def stored_sentence(lesson: ActivationLesson) -> str:
    """What the hook stored, and why CAM wants it."""
    module = _module(lesson.module)
    if lesson.output_shape is None:
        return (f"the forward never calls {module}: the forward hook on it never fired and "
                f"{lesson.name} stays empty")
    what = ("the model's output, not an intermediate activation" if lesson.module == ""
            else "the activation at an intermediate layer, as CAM needs")
    sentence = (f"a forward hook on {module} stored its output {_shape(lesson.output_shape)} in "
                f"{lesson.name}: {what}")
    calls = lesson.calls_per_forward
    if calls > 1:
        sentence += (f"; the forward calls {module} {fmt(calls)} times, and the hook fires once "
                     f"per call: {fmt(calls)} entries per forward")
    return sentence


def removal_sentence(lesson: ActivationLesson) -> str:
    """What the forward after `handle.remove()` shows (or that the handle was never removed)."""
    name = lesson.name
    if lesson.remove_after is None or not lesson.forwards:
        held = lesson.forwards[-1].stored_count if lesson.forwards else 0
        return (f"no remove_after: handle.remove() is never called, so every further forward "
                f"would append to {name} again (it holds {_count(held, 'tensor')}; gradexplain's "
                f"own with-block removes the hook when the run ends)")
    last = lesson.forwards[-1]
    when = ("handle.remove() ran before the 1st forward, so "
            if lesson.remove_after == 0 else "after handle.remove() ")
    if last.hooked or last.fired:
        return (f"{when}the {_ordinal(last.number)} forward still called the hook: {name} grew to "
                f"{_count(last.stored_count, 'tensor')}")
    verb = "still holds" if lesson.remove_after > 0 else "holds"
    return (f"{when}the {_ordinal(last.number)} forward did not call the hook: {name} {verb} "
            f"{_count(last.stored_count, 'tensor')}")


def check_sentence(lesson: ActivationLesson) -> str:
    """The verdict over the counts and every entry, against the hook-free run."""
    names = ", ".join(lesson.output_names) or "nothing"
    if lesson.verified:
        if not lesson.stored:
            return "✓ nothing stored, as the hook-free run predicts"
        after = "" if lesson.remove_after is None else ", none after handle.remove()"
        return (f"✓ every entry equals {names} of a hook-free run (max abs error "
                f"{fmt(lesson.max_abs_err)}), one entry per call of the module while hooked"
                f"{after}")
    wrong_counts = any(forward.entries != (lesson.calls_per_forward if forward.hooked else 0)
                       for forward in lesson.forwards)
    reason = (f"the entries per forward differ from the calls of the hook-free run "
              f"({fmt(lesson.calls_per_forward)} per forward while hooked, 0 after)"
              if wrong_counts else f"an entry differs from {names} of a hook-free run")
    return f"✗ FAILED: {reason} (max abs error {fmt(lesson.max_abs_err)})"


def hook_state(forward: ForwardCall) -> str:
    if not forward.hooked:
        return "removed"
    if not forward.fired:
        return "not called"
    return "fired" if forward.entries == 1 else f"fired {fmt(forward.entries)} times"


def entry_source(entry: StoredEntry, lesson: ActivationLesson) -> str:
    where = f"forward {fmt(entry.forward)}"
    if lesson.calls_per_forward > 1:
        where += f", call {fmt(entry.call + 1)}"
    return where


def entry_check(entry: StoredEntry) -> str:
    if entry.verified:
        return f"✓ max abs error {fmt(entry.max_abs_err)}"
    return f"✗ FAILED (error {fmt(entry.max_abs_err)})"


# Text.

def _lesson_text(lesson: ActivationLesson) -> RenderableType:
    mark, mark_style = ("✓", "green") if lesson.verified else ("✗ FAILED", "bold red")
    heading = f"{title(lesson)} {mark}"

    def head(width: int) -> list[Text]:
        lines = prose(heading, width, "bold cyan")
        lines[-1].stylize(mark_style, len(lines[-1]) - len(mark))
        return lines

    body: list[RenderableType] = [_prose(stored_sentence(lesson))]
    forwards: list[list[Cell]] = [
        [fmt(forward.number), hook_state(forward), fmt(forward.entries),
         fmt(forward.stored_count), "handle.remove()" if forward.removed_after else ""]
        for forward in lesson.forwards]
    forward_columns = [Column(header.format(name=lesson.name)) for header in FORWARD_HEADERS]
    body += [Fitted(lambda width: table_lines(forward_columns, forwards, width, "bold")),
             _prose(removal_sentence(lesson))]
    if lesson.stored:
        entries: list[list[Cell]] = [
            [f"{lesson.name}[{fmt(entry.index)}]", entry_source(entry, lesson),
             *_value_cells(entry),
             Text(entry_check(entry), style="green" if entry.verified else "bold red")]
            for entry in lesson.stored]
        entry_columns = [Column(header, at_end=header == "check") for header in ENTRY_HEADERS]
        body.append(Fitted(lambda width: table_lines(entry_columns, entries, width, "bold")))
    body.append(_prose(check_sentence(lesson), "green" if lesson.verified else "bold red"))
    return Group(Fitted(head), Padding(Group(*body), (0, 0, 0, 2)))


def _prose(text: str, style: str = "") -> Fitted:
    return Fitted(lambda width: prose(text, width, style))


def _value_cells(entry: StoredEntry) -> list[Cell]:
    """The entry's value as one cell: a tensor laid out by rows, or the values as text when
    the hook stored several (or none)."""
    if len(entry.values) == 1:
        return [Shown(entry.values[0])]
    return [_values(entry)]


# Markdown.

def _lesson_markdown(lesson: ActivationLesson, level: int) -> str:
    forwards = table(
        [escape(header.format(name=lesson.name)) for header in FORWARD_HEADERS],
        [[fmt(forward.number), escape(hook_state(forward)), fmt(forward.entries),
          fmt(forward.stored_count), code("handle.remove()") if forward.removed_after else ""]
         for forward in lesson.forwards],
        ["right", "left", "right", "right", "left"],
    )
    entries = "" if not lesson.stored else table(
        ENTRY_HEADERS,
        [[code(f"{lesson.name}[{fmt(entry.index)}]"), escape(entry_source(entry, lesson)),
          code(_values(entry)), _markdown_check(entry_check(entry), entry.verified)]
         for entry in lesson.stored],
    )
    return blocks(
        heading(level, escape(title(lesson))),
        bullets([escape(stored_sentence(lesson)), escape(removal_sentence(lesson))]),
        forwards,
        entries,
        _markdown_check(check_sentence(lesson), lesson.verified),
    )


def _markdown_check(text: str, verified: bool) -> str:
    return escape(text, block=True) if verified else bold(escape(text))


# Helpers.

def _values(entry: StoredEntry) -> str:
    return "; ".join(fmt_value(value) for value in entry.values) or "(no tensor)"


def _module(path: str) -> str:
    return path or "the top-level model"


def _shape(shape: tuple[int, ...]) -> str:
    """A shape as Python prints it, the way the article's readers see `.shape`: (1, 4, 8, 8)."""
    if len(shape) == 1:
        return f"({fmt(shape[0])},)"
    return "(" + ", ".join(fmt(size) for size in shape) + ")"


def _count(number: int, noun: str) -> str:
    return f"{fmt(number)} {noun}" + ("" if number == 1 else "s")


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(
        number % 10, "th")
    return f"{fmt(number)}{suffix}"


__all__ = ["activations_markdown", "activations_text", "check_sentence", "removal_sentence",
           "stored_sentence", "title"]
