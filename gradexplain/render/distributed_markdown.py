"""`walk --ranks N --format markdown`, and the blocks of its answer the report's distributed
section uses (`answer_blocks`): GitHub markdown as a string, never printed.

Mirrors render/distributed_text.py section for section; what to show is distributed_answer.py's,
numbers go through fmt, markdown syntax through render/markdown.py. No torch here.
"""

from __future__ import annotations

from gradexplain.records.distributed import DistributedWalk
from gradexplain.records.numbers import fmt
from gradexplain.render.distributed_answer import (
    CHECKED_AGAINST,
    REFERENCE,
    AnswerGroup,
    Cell,
    answer_groups,
    answer_rows,
    changed_options,
    firing_orders,
    first_difference,
    ranks_text,
    refusing_ranks,
    silences,
    words,
    wrapping,
)
from gradexplain.render.lessons.calls import runs_markdown
from gradexplain.render.markdown import (
    blocks,
    bold,
    bullets,
    code,
    escape,
    heading,
    italic,
    table,
)
from gradexplain.render.markdown_walk import alert, failure_item, pass_markdown
from gradexplain.render.marks import check_cell, value_cell

ANSWER_HEADING = "What each hook on a parameter gets"


def distributed_markdown(walk: DistributedWalk, level: int = 2, timeline: bool = False) -> str:
    """The whole distributed walk: a header paragraph with each rank's inputs, the answer,
    the hooks that never fired, the pitfalls, the firing order, with `timeline` each rank's
    hook timelines, and the checks; sections headed at `level`."""
    parts = [_header(walk), *answer_blocks(walk, level), _order(walk, level)]
    for rank in refusing_ranks(walk):
        parts.append(heading(level, f"Rank {rank.rank}: the calls, and what torch refused"))
        parts.append(runs_markdown(rank.walk, level + 1, headed=False))
    if timeline:
        for rank in walk.ranks:
            parts.append(heading(level, f"Rank {rank.rank}"))
            parts += [pass_markdown(walk_pass, level + 1) for walk_pass in rank.walk.passes]
    parts += [heading(level, "Checks"), _checks(walk)]
    return blocks(*parts)


def _header(walk: DistributedWalk) -> str:
    parts = [f"{bold(escape(walk.name))} · {code(walk.spec)} · torch {escape(walk.torch)}",
             escape(wrapping(walk) + "."), ]
    if walk.about:
        parts.append(escape(walk.about, block=True))
    options = changed_options(walk.ddp)
    if options:
        parts.append("DDP options that differ from torch's defaults: "
                     + ", ".join(code(item) for item in options) + ".")
    rows = [[fmt(rank.rank), code(name), value_cell(value)]
            for rank in walk.ranks for name, value in rank.inputs]
    if rows:
        parts.append(table(["rank", "input", "value"], rows, ("right", None, None)))
    parts += [alert("NOTE", escape(note)) for note in walk.notes]
    return blocks(*parts)


def answer_blocks(walk: DistributedWalk, level: int = 2) -> list[str]:
    """The answer's sections as markdown blocks: what each hook on a parameter gets (a table per
    hook, a column per rank), the hooks that never fired, what a user would get wrong."""
    groups = answer_groups(answer_rows(walk))
    parts: list[str] = []
    if groups:
        parts += [heading(level, ANSWER_HEADING),
                  "Each rank's value and its check, hook by hook, with whose derivative the "
                  "values are and when they were taken."]
        for group in groups:
            parts += [_group_intro(group), _group_table(walk, group)]
    found = silences(walk)
    if found:
        parts += [heading(level, "Hooks that never fired"), bullets([
            f"{code(silence.hook)} on {', '.join(code(item) for item in silence.targets)}, "
            f"on {ranks_text(silence.ranks)}: {escape(silence.why)}" for silence in found])]
    if walk.pitfalls:
        parts += [heading(level, "What you would get wrong"), bullets([
            f"{bold(escape(item.title))}: {escape(item.text)}" for item in walk.pitfalls])]
    return parts


def _group_intro(group: AnswerGroup) -> str:
    return f"{bold(escape(group.label))}: {escape(words(group))}"


def _group_table(walk: DistributedWalk, group: AnswerGroup) -> str:
    notes = any(group.differs(row) for row in group.rows)
    headers = ["parameter", *(f"rank {rank.rank}" for rank in walk.ranks)]
    rows = []
    for row in group.rows:
        cells = [code(row.parameter), *(_cell(item) for item in row.cells)]
        if notes:
            cells.append(escape(words(row)) if group.differs(row) else "")
        rows.append(cells)
    return table(headers + (["whose, when"] if notes else []), rows)


def _cell(cell: Cell) -> str:
    if not cell.fired:
        return italic("never fired")
    mark = check_cell(cell.check, cell.not_checked)
    return f"{value_cell(cell.value)} {mark}".strip()



def _order(walk: DistributedWalk, level: int) -> str:
    orders = firing_orders(walk)
    if not orders:
        return ""
    differs = first_difference(orders)
    intro = ("The full pass's hook calls in the order they ran (pre-hooks and node hooks left "
             "out)" + (", with DDP's communication hook where each bucket was handed over; "
                       if walk.wrap == "ddp" else "; "))
    intro += (f"the same on {ranks_text(orders[0].ranks)}." if differs is None
              else f"the ranks' orders differ from step {fmt(differs + 1)} on.")
    items = [" → ".join(code(step) for step in order.steps) for order in orders]
    if differs is not None:
        items = [f"{ranks_text(order.ranks)}: {item}" for order, item in
                 zip(orders, items, strict=True)]
    return blocks(heading(level, "Firing order"), intro, bullets(items))



def _checks(walk: DistributedWalk) -> str:
    total = len(walk.checks())
    failures = walk.failures()
    if not failures:
        return f"✓ All {fmt(total)} checks verified against {CHECKED_AGAINST}."
    lines = [bold(f"✗ {fmt(len(failures))} of {fmt(total)} checks FAILED")
             + ": these labels are wrong or the run differs.", "",
             *(f"- {failure_item(failure, REFERENCE)}" for failure in failures)]
    return alert("CAUTION", "\n".join(lines))


__all__ = ["answer_blocks", "distributed_markdown"]
