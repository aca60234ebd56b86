"""`walk --format text`: rich renderables for a person at a terminal (readable at 100 columns).

The renderer returns a renderable; `cli.py` prints it. Colour is the console's business: rich
drops it when output is piped or NO_COLOR is set. The answer and the pinned chain rule are
text_pinned.py's; a deep model's repeated blocks fold (folding.py; `--all-blocks` turns it off).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from gradexplain.analysis.pinned import pinned_view
from gradexplain.records.check import summaries_not_checked_text
from gradexplain.records.numbers import fmt, fmt_value
from gradexplain.records.paths import module_title
from gradexplain.records.pinned import PinnedView
from gradexplain.records.refusals import refusal_text
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import Check, Failure, LabelledEvent, PassWalk, Walk
from gradexplain.render.collapse import shape_key
from gradexplain.render.console import title_line, user_text
from gradexplain.render.folding import Outline, fold_repeats
from gradexplain.render.lessons import lessons_text
from gradexplain.render.marks import check_mark
from gradexplain.render.text_columns import Columns, Row, Rows
from gradexplain.render.text_pinned import (
    answer_text,
    other_graph_lines,
    pinned_text,
    unpinned_lines,
)
from gradexplain.render.user_hooks import user_hook_line, user_mark
from gradexplain.render.warned import warnings_text

PASS_TITLES = {
    "legacy": "legacy pass: register_backward_hook on every module",
    "full": "full pass: register_full_backward_pre_hook + register_full_backward_hook",
}


def walk_text(walk: Walk, view: PinnedView | None = None, *, collapse: bool = True,
              timeline: bool = False) -> RenderableType:
    """The whole walk as rich renderables: the answer (what each module's hooks get), the
    chain rule with every hook argument at its step, lessons, the passes' timelines (with
    `timeline`; else only what they note), the verdict.

    `view` defaults to the walk's own, without the answer (which needs the session's diff).
    With `collapse`, runs of repeated blocks (a deep model's) are folded into one note each."""
    view = view or pinned_view(walk, None)
    parts: list[RenderableType] = [_header(walk)]
    parts.append(answer_text(view.answers, [item.mode for item in walk.passes], collapse))
    parts += [pinned_text(derivation, collapse) for derivation in view.derivations]
    if view.elsewhere or view.other_graph:
        parts.append(Group(*unpinned_lines("in no chain rule (calls torch refused):",
                                           view.elsewhere),
                           *other_graph_lines(view.other_graph), Text("")))
    parts += lessons_text(walk)
    for walk_pass in walk.passes:
        parts.append(pass_text(walk_pass, collapse) if timeline else _pass_notes(walk_pass))
    parts.append(_verdict(walk))
    return Group(*parts)


def _header(walk: Walk) -> RenderableType:
    title = title_line(walk.name, walk.spec, walk.torch)
    lines: list[RenderableType] = [title]
    if walk.about:
        lines.append(user_text(walk.about, "dim"))
    if walk.interventions:
        lines.append(Text("the two passes below run without the spec's interventions, so "
                          "every label keeps its meaning; each intervention is compared with "
                          "and without it in its own section", style="dim"))
    return Group(*lines, Text(""))


def _pass_notes(walk_pass: PassWalk) -> RenderableType:
    """A pass without its timeline: only what it notes, under its title (nothing when it
    notes nothing)."""
    notes = _notes(walk_pass) + (warnings_text(walk_pass.warnings) if walk_pass.warnings
                                 else [])
    if not notes:
        return Group()
    title = Text(PASS_TITLES[walk_pass.mode] + " (its timeline: --timeline)", style="bold")
    return Group(title, *notes, Text(""))


def _notes(walk_pass: PassWalk) -> list[RenderableType]:
    """What a pass says before its events: the graph its hooks changed, the user's hooks,
    the modules torch refuses full hooks on."""
    notes: list[RenderableType] = []
    if walk_pass.graph_changed:
        notes.append(Text(f"Note: {walk_pass.graph_changed}", style="yellow"))
    for hook in walk_pass.user_hooks:
        notes.append(Padding(Text(user_hook_line(hook, walk_pass.mode), style="magenta"),
                             (0, 0, 0, 2)))
    for refusal in walk_pass.refusals:
        notes.append(Padding(Text(refusal_text(refusal), style="yellow"), (0, 0, 0, 2)))
    for failure in walk_pass.failed_runs:
        notes.append(Padding(Text(f"✗ FAILED: {failure.sentence()}", style="bold red"),
                             (0, 0, 0, 2)))
    return notes


def pass_text(walk_pass: PassWalk, collapse: bool, title: str | None = None,
              after: Mapping[int | None, Sequence[RenderableType]] | None = None
              ) -> RenderableType:
    """One pass's timeline under `title` (default: the pass's own), each event followed by
    what `after` holds for its seq (None: before the first event), unfolded (a `walk --ranks`
    rank's DDP buckets, between the hook calls they followed)."""
    after = after or {}
    parts: list[RenderableType] = [Text(title or PASS_TITLES[walk_pass.mode],
                                        style="bold underline"),
                                   *_notes(walk_pass), *after.get(None, ())]
    # Each event's rows made once: they set the columns, then are laid out in them.
    events = [(event, _arg_rows(event)) for event in walk_pass.events]
    # One set of columns for the whole pass, so they do not shift from event to event.
    columns = Columns.of(row for _, rows in events for row in rows)
    parts += fold_repeats(
        events, lambda item: _followed(_event(*item, columns), after.get(item[0].seq)),
        lambda item: _event_outline(item[0], item[0].seq in after), "events", collapse)
    if walk_pass.grads:
        rows = tuple(Row(f"{grad.name}.grad =", "", grad.value,
                         _changed_mark(grad.modified_by) or check_mark(grad.check))
                     for grad in walk_pass.grads)
        parts += [Text("final .grad of every leaf", style="bold"),
                  Padding(Rows(rows, Columns.of(rows)), (0, 0, 0, 2))]
    if walk_pass.warnings:
        parts += warnings_text(walk_pass.warnings)
    parts.append(Text(""))
    return Group(*parts)


def _followed(shown: RenderableType,
              following: Sequence[RenderableType] | None) -> RenderableType:
    return shown if not following else Group(shown, *following)


def _event(event: LabelledEvent, rows: tuple[Row, ...], columns: Columns) -> RenderableType:
    """`12 backward module2 on SigmoidBackward0`, then one row per argument."""
    head = Text.assemble((f"{event.seq:>3} ", "dim"), (event.hook, "bold"), " ",
                         (module_title(event.target), "cyan"))
    if event.node:
        head.append(f" on {display_node(event.node)}")
    if event.user is not None:
        head.append(f"  {user_mark(event.user)}", style="bold magenta")
    parts: list[RenderableType] = [head]
    if event.why:
        parts.append(Padding(Text(event.why, style="dim italic"), (0, 0, 0, 6)))
    if rows:
        parts.append(Padding(Rows(rows, columns), (0, 0, 0, 6)))
    return Group(*parts)


def _arg_rows(event: LabelledEvent) -> tuple[Row, ...]:
    """An event's arguments, then what the user's hook returned, as timeline rows."""
    rows: list[Row] = []
    for arg in event.args:
        meaning = arg.meaning.text if arg.meaning is not None else (
            "(forward value)" if event.phase == "forward" else "")
        mark = check_mark(arg.check, arg.not_checked)
        if arg.meaning is not None and arg.meaning.modified_by is not None:
            mark = Text("not checked", style="magenta")
        rows.append(Row(arg.name, meaning, arg.value, mark))
    for arg in event.returned or ():
        note = "what your hook returned" + (" (changed)" if event.changed else " (the same)")
        rows.append(Row(f"→ {arg.name}", note, arg.value, Text(""), meaning_style="magenta"))
    return tuple(rows)


def _event_outline(event: LabelledEvent, followed: bool = False) -> Outline:
    """The event as folding sees it; `followed`: something is shown after it (never folded)."""
    rows = [f"{event.phase} {event.hook} {event.target} {event.node or ''} {event.user or ''}",
            event.why or "", f"{event.returned is not None} {event.changed}"]
    rows += [f"{arg.name} {arg.meaning.text if arg.meaning else ''} {_mark(arg.check)}"
             for arg in event.args]
    text = "\n".join(rows)
    checks = [arg.check for arg in event.args if arg.check is not None]
    failed = not all(check.verified for check in checks)
    shape = None if failed or followed else (event.run, shape_key(text),
                                 tuple(_size(arg.value) for arg in event.args))
    return Outline(text, shape, len(checks))


def _changed_mark(function: str | None, prefix: str = "") -> Text | None:
    """Where the user's hook changed a value: said instead of a check (none was made)."""
    if function is None:
        return None
    return Text(f"{prefix}changed by your hook {function}: not checked", style="magenta")


def _mark(check: Check | None) -> str:
    return "-" if check is None else "✓" if check.verified else "✗"


def _size(value: TensorValue | None) -> tuple[int, ...] | None:
    """A value's shape: two blocks of different widths print differently, so do not match."""
    return None if value is None else value.shape


def display_node(name: str) -> str:
    """`torch::autograd::AccumulateGrad` reads as `AccumulateGrad`."""
    return name.removeprefix("torch::autograd::")


def _verdict(walk: Walk) -> RenderableType:
    source = "model" if walk.whole_names else "spec"
    verdict = verdict_text(len(walk.checks()), walk.failures(),
                           f"a hook-free run of the same {source}", "the hook-free run")
    unchecked = walk.summaries_not_checked()
    if not unchecked:
        return verdict
    return Group(verdict, Text(summaries_not_checked_text(unchecked), style="yellow"))


def verdict_text(total: int, failures: Sequence[Failure], against: str,
                 reference: str) -> RenderableType:
    """The last line: every check verified against `against`, or each failure loudly, with
    what `reference` (the run checked against) gives."""
    if not failures:
        return Text(f"all {total} checks verified against {against}", style="bold green")
    lines: list[RenderableType] = [
        Text(f"{len(failures)} of {total} checks FAILED: these labels are wrong or the run "
             "differs", style="bold red")]
    for failure in failures:
        mode = f"{failure.mode} " if failure.mode else ""
        if failure.check.expected is None:
            # Nothing to compare with (a refused call, a lesson's identity): the claim says it.
            lines.append(Text(f"  ✗ {mode}{failure.where}: {failure.claim}", style="red"))
            continue
        expected = fmt_value(failure.check.expected)
        lines.append(Text(f"  ✗ {mode}{failure.where}: claimed {failure.claim}; {reference} "
                          f"gives {expected} (error {fmt(failure.check.max_abs_err)})",
                          style="red"))
    return Group(*lines)
