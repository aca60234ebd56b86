"""`walk --format text`: rich renderables for a person at a terminal (readable at 100 columns).

The renderer returns a renderable; `cli.py` prints it. Colour is the console's business: rich
drops it when output is piped or NO_COLOR is set. A deep model's blocks repeat: runs of events
and chain-rule lines that differ only in block numbers and values are folded into one note each
(`collapse.py` finds them; `--all-blocks` turns it off).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradexplain.records.names import Naming
from gradexplain.records.numbers import fmt, fmt_value
from gradexplain.records.paths import module_title
from gradexplain.records.refusals import refusal_text
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import (
    Check,
    Derivation,
    DerivationLine,
    LabelledEvent,
    PassWalk,
    Walk,
)
from gradexplain.render.collapse import (
    Folded,
    FoldedBlocks,
    Shown,
    folded_blocks,
    plan_folds,
    shape_key,
)
from gradexplain.render.lessons import lessons_text
from gradexplain.render.marks import check_mark
from gradexplain.render.text_columns import Columns, Row, Rows
from gradexplain.render.user_hooks import user_hook_line, user_mark
from gradexplain.render.warned import warnings_text

PASS_TITLES = {
    "legacy": "legacy pass: register_backward_hook on every module",
    "full": "full pass: register_full_backward_pre_hook + register_full_backward_hook",
}

Item = TypeVar("Item")


def walk_text(walk: Walk, *, collapse: bool = True) -> RenderableType:
    """The whole walk as rich renderables: lessons, chain rule, both passes, the verdict.

    With `collapse`, runs of repeated blocks (a deep model's) are folded into one note each."""
    parts: list[RenderableType] = [_header(walk)]
    parts += lessons_text(walk)
    for derivation in walk.derivations:
        parts.append(_derivation(derivation, collapse, walk.naming))
    for walk_pass in walk.passes:
        parts.append(_pass(walk_pass, collapse))
    parts.append(_verdict(walk))
    return Group(*parts)


def _header(walk: Walk) -> RenderableType:
    title = Text.assemble((walk.name, "bold"), f"  {walk.spec}  (torch {walk.torch})")
    lines: list[RenderableType] = [title]
    if walk.about:
        lines.append(Text(walk.about, style="dim"))
    if walk.interventions:
        lines.append(Text("the two passes below run without the spec's interventions, so "
                          "every label keeps its meaning; each intervention is compared with "
                          "and without it in its own section", style="dim"))
    return Group(*lines, Text(""))


def _derivation(derivation: Derivation, collapse: bool, naming: Naming) -> RenderableType:
    call = "backward" if derivation.kind == "backward" else "autograd.grad"
    title = f"chain rule of run {derivation.run}: {call} of {derivation.of}"
    lines: list[RenderableType] = []
    if derivation.seed is not None:
        title += f", seed gradient v = {fmt_value(derivation.seed)}"
        lines.append(Text(f"every g below is vᵀ·∂{derivation.of}/∂(·): a vector-Jacobian "
                          "product, v weighing each output element", style="dim italic"))
    lines.insert(0, Text(title, style="bold underline"))
    numerator = ("vᵀ·" if derivation.seed is not None else "") + "∂" + derivation.of
    lines += _folding_repeats(derivation.lines,
                              lambda line: _derivation_line(numerator, line, naming),
                              _line_outline, "lines", collapse)
    lines.append(Text(""))
    return Group(*lines)


def _derivation_line(numerator: str, line: DerivationLine, naming: Naming) -> RenderableType:
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(max_width=80)
    table.add_column(no_wrap=True)
    gradient = f"  g = {numerator}/∂{naming.short(line.output)} = "
    head = Text.assemble((display_node(line.node), "cyan"), gradient, fmt_value(line.upstream))
    if not line.has_rule:
        head.append("  (no rule for this node type: generic vector-Jacobian product)",
                    style="dim")
    for term in line.terms:
        table.add_row(f"  → {naming.short(term.wrt)}:",
                      Text(f"{term.local} = {fmt_value(term.value)}"),
                      _changed_mark(term.modified_by, "the pass saw it ") or
                      check_mark(term.check))
    return Group(head, table)


def _pass(walk_pass: PassWalk, collapse: bool) -> RenderableType:
    parts: list[RenderableType] = [Text(PASS_TITLES[walk_pass.mode], style="bold underline")]
    if walk_pass.graph_changed:
        parts.append(Text(f"Note: {walk_pass.graph_changed}", style="yellow"))
    for hook in walk_pass.user_hooks:
        parts.append(Padding(Text(user_hook_line(hook, walk_pass.mode), style="magenta"),
                             (0, 0, 0, 2)))
    for refusal in walk_pass.refusals:
        parts.append(Padding(Text(refusal_text(refusal), style="yellow"), (0, 0, 0, 2)))
    # One set of columns for the whole pass, so they do not shift from event to event.
    columns = Columns.of(row for event in walk_pass.events for row in _arg_rows(event))
    parts += _folding_repeats(walk_pass.events, lambda event: _event(event, columns),
                              _event_outline, "events", collapse)
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


def _event(event: LabelledEvent, columns: Columns) -> RenderableType:
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
    rows = _arg_rows(event)
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


@dataclass(frozen=True)
class _Outline:
    """An event or chain-rule line as the folding sees it: `text`, what it prints bar values
    and sequence numbers; `shape`, what must match for two items to read alike (None for an
    item with a failed check: never folded); `checks`, how many checks it shows."""

    text: str
    shape: Hashable | None
    checks: int


def _folding_repeats(items: Sequence[Item], render: Callable[[Item], RenderableType],
                     outline: Callable[[Item], _Outline], what: str,
                     collapse: bool) -> list[RenderableType]:
    """Each item rendered, except runs of repeated blocks, each folded into one note."""
    if not collapse:
        return [render(item) for item in items]
    outlines = [outline(item) for item in items]
    plan = plan_folds([item.shape for item in outlines])
    texts = [item.text for item in outlines]
    parts: list[RenderableType] = []
    for step in plan.steps:
        if isinstance(step, Shown):
            parts += [render(item) for item in items[step.start:step.stop]]
        else:
            checks = sum(item.checks for item in outlines[step.start:step.stop])
            parts.append(_fold_note(step, folded_blocks(step, texts), what, checks))
    return parts


def _fold_note(fold: Folded, blocks: FoldedBlocks | None, what: str, checks: int) -> Text:
    """`⋯ blocks 3–47 and parts of 2, 48 folded: 230 lines, all 322 checks ✓; …`: one line.

    A repeat need not start where a block does (backward interleaves neighbouring blocks), so
    the note names the blocks it hides whole and those it hides in part; without blocks to
    name, it counts the repeats."""
    if blocks is None:
        hidden = f"{fold.repeats} more repeats"
    else:
        whole = blocks.whole
        hidden = (f"block {whole.start}" if len(whole) == 1
                  else f"blocks {whole.start}–{whole[-1]}")
        if blocks.parts:
            hidden += " and parts of " + _ranges(blocks.parts)
        hidden += " folded"
    # Failed checks are never folded (plan_folds), so whatever is folded verified.
    checked = f"all {checks} checks ✓" if checks else "no checks"
    return Text(f"  ⋯ {hidden}: {fold.stop - fold.start} {what}, {checked}; "
                "--all-blocks shows them", style="dim")


def _ranges(numbers: Sequence[int]) -> str:
    """Sorted numbers with consecutive runs joined: `2–4, 8–10, 48`."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}" for run in runs)


def _event_outline(event: LabelledEvent) -> _Outline:
    rows = [f"{event.phase} {event.hook} {event.target} {event.node or ''} {event.user or ''}",
            event.why or "", f"{event.returned is not None} {event.changed}"]
    rows += [f"{arg.name} {arg.meaning.text if arg.meaning else ''} {_mark(arg.check)}"
             for arg in event.args]
    text = "\n".join(rows)
    checks = [arg.check for arg in event.args if arg.check is not None]
    failed = not all(check.verified for check in checks)
    shape = None if failed else (event.run, shape_key(text),
                                 tuple(_size(arg.value) for arg in event.args))
    return _Outline(text, shape, len(checks))


def _line_outline(line: DerivationLine) -> _Outline:
    rows = [f"{line.node} {line.output} {line.has_rule}"]
    rows += [f"{term.wrt} {term.local} {_mark(term.check)}" for term in line.terms]
    text = "\n".join(rows)
    checks = [term.check for term in line.terms if term.check is not None]
    failed = not all(check.verified for check in checks)
    shape = None if failed else (shape_key(text), _size(line.upstream),
                                 tuple(_size(term.value) for term in line.terms))
    return _Outline(text, shape, len(checks))


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
    total = len(walk.checks())
    failures = walk.failures()
    if not failures:
        source = "model" if walk.whole_names else "spec"
        return Text(f"all {total} checks verified against a hook-free run of the same {source}",
                    style="bold green")
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
        lines.append(Text(f"  ✗ {mode}{failure.where}: claimed {failure.claim}; the hook-free "
                          f"run gives {expected} (error {fmt(failure.check.max_abs_err)})",
                          style="red"))
    return Group(*lines)
