"""`walk --ranks N --format text`: the distributed walk as rich renderables for a person at a
terminal, laid out at 100 columns (`cli.py` prints them; rich drops colour when piped).

The answer comes first (what each hook on a parameter gets, rank by rank, whose derivative it is
and when), then the hooks that never fired, the pitfalls, each rank's firing order, with
`timeline` each rank's timelines (the single-process renderer's, DDP's buckets between the hook
calls they followed), and the verdict. What to show is distributed_answer.py's; numbers go
through records/numbers.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from gradexplain.records.check import summaries_not_checked_text
from gradexplain.records.distributed import CheckedBucket, DistributedWalk, RankWalk
from gradexplain.records.numbers import fmt_value
from gradexplain.render.console import title_line, user_text
from gradexplain.render.distributed_answer import (
    CHECKED_AGAINST,
    REFERENCE,
    AnswerGroup,
    AnswerRow,
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
from gradexplain.render.fit import GAP, row_lines, value_lines, word_lines
from gradexplain.render.lessons.calls import runs_text
from gradexplain.render.marks import check_mark
from gradexplain.render.text_columns import Columns, Row, Rows
from gradexplain.render.text_pinned import WIDTH
from gradexplain.render.text_walk import PASS_TITLES, pass_text, verdict_text

ANSWER_TITLE = "what each hook on a parameter gets"
# The parameter column's widest; a rank's column narrower than MIN_CELL gives each rank a line.
MAX_NAME = 26
MIN_CELL = 24
INDENT = 2
NEVER_FIRED = "never fired"


def distributed_text(walk: DistributedWalk, *, timeline: bool = False,
                     collapse: bool = True) -> RenderableType:
    """The whole distributed walk: header, the answer, silent hooks, pitfalls, firing order,
    each rank's timelines (with `timeline`), the verdict."""
    parts: list[RenderableType] = [_header(walk), answer_text(walk), silent_text(walk),
                                   pitfalls_text(walk), order_text(walk)]
    for rank in refusing_ranks(walk):
        parts += [Text(f"rank {rank.rank}: the calls, and what torch refused", style="bold"),
                  runs_text(rank.walk)]
    if timeline:
        parts += [_rank_timeline(rank, collapse) for rank in walk.ranks]
    parts.append(verdict_text(len(walk.checks()), walk.failures(), CHECKED_AGAINST, REFERENCE))
    unchecked = sum(rank.walk.summaries_not_checked() for rank in walk.ranks)
    if unchecked:
        parts.append(Text(summaries_not_checked_text(unchecked), style="yellow"))
    return Group(*parts)


def _header(walk: DistributedWalk) -> RenderableType:
    lines: list[RenderableType] = [
        title_line(walk.name, walk.spec, walk.torch)]
    if walk.about:
        lines.append(user_text(walk.about, "dim"))
    options = changed_options(walk.ddp)
    setting = (f"; DDP options: {', '.join(options)}" if options
               else "; DDP options: torch's defaults" if walk.ddp is not None else "")
    lines.append(Text(wrapping(walk) + setting))
    for rank in walk.ranks:
        inputs = ", ".join(f"{name} = {fmt_value(value)}" for name, value in rank.inputs)
        lines += _wrapped(f"rank {rank.rank} inputs: {inputs or 'none'}", INDENT, "")
    lines += [Text(note, style="yellow") for note in walk.notes]
    return Group(*lines, Text(""))


# --- the answer ----------------------------------------------------------------------------


def answer_text(walk: DistributedWalk) -> RenderableType:
    """Hook by hook (tensor, post-accumulate-grad, each bucket before and after, `.grad`), under
    whose derivative its values are and when: one row per parameter, each rank's value and check
    in a column of its own (a line per rank where the columns would be too narrow)."""
    groups = answer_groups(answer_rows(walk))
    if not groups:
        return Group()
    name = min(max(len(row.parameter) for group in groups for row in group.rows), MAX_NAME)
    ranks = len(walk.ranks)
    cell = (WIDTH - INDENT - name - GAP * ranks) // max(ranks, 1)
    by_column = cell >= MIN_CELL
    title = Text(ANSWER_TITLE, style="bold underline")
    if any(rank.pass_named("full") for rank in walk.ranks):
        title.append(" (full pass)", style="bold")
    lines: list[RenderableType] = [title]
    if by_column:
        lines.append(Text(row_lines([[""], *([f"rank {rank.rank}"] for rank in walk.ranks)],
                                    [INDENT + name, *[cell] * ranks])[0], style="dim"))
    for group in groups:
        lines += _group_heading(group)
        for row in group.rows:
            lines += (_column_row(row, name, cell) if by_column
                      else _ranked_row(row, walk.ranks))
            if group.differs(row):
                lines += _wrapped(words(row), 2 * INDENT, "dim")
    lines.append(Text(""))
    return Group(*lines)


def _group_heading(group: AnswerGroup) -> list[Text]:
    """`tensor (register_hook): each rank's own · before DDP's all-reduce`, the hook bold."""
    lines = _wrapped(f"{group.label}: {words(group)}", INDENT, "dim", 0)
    lines[0].stylize("bold not dim", 0, len(group.label))
    return lines



def _column_row(row: AnswerRow, name: int, cell: int) -> list[Text]:
    cells = [[" " * INDENT + line for line in word_lines(row.parameter, name)],
             *(_cell_lines(item, cell) for item in row.cells)]
    return [_marked(line) for line in row_lines(cells, [INDENT + name, *[cell] * len(
        row.cells)])]


def _ranked_row(row: AnswerRow, ranks: Sequence[RankWalk]) -> list[Text]:
    lines = [Text(" " * INDENT + row.parameter, style="cyan")]
    name = max(len(f"rank {rank.rank}") for rank in ranks)
    width = WIDTH - 2 * INDENT - name - GAP
    for rank, item in zip(ranks, row.cells, strict=True):
        lines += [_marked(line) for line in row_lines(
            [[" " * 2 * INDENT + f"rank {rank.rank}"], _cell_lines(item, width)],
            [2 * INDENT + name, width])]
    return lines


def _cell_lines(cell: Cell, width: int) -> list[str]:
    """A rank's value with its mark after it, or on lines of its own where it does not fit."""
    if not cell.fired:
        return [NEVER_FIRED]
    mark = check_mark(cell.check, cell.not_checked).plain
    lines = value_lines(cell.value, width)
    if not mark:
        return lines
    if len(lines[-1]) + 1 + len(mark) <= width:
        lines[-1] += " " + mark
        return lines
    return lines + word_lines(mark, width)


def _marked(line: str) -> Text:
    """A line with its marks coloured as check_mark colours them."""
    text = Text(line)
    text.highlight_words(["✓"], "green")
    text.highlight_words(["✗ FAILED"], "bold red")
    text.highlight_words(["not checked", NEVER_FIRED], "yellow")
    return text


def _wrapped(text: str, indent: int, style: str, first: int | None = None) -> list[Text]:
    """`text` in lines of WIDTH, each after `indent` spaces (the first after `first`)."""
    lines = word_lines(text, WIDTH - indent)
    start = indent if first is None else first
    return [Text(" " * (start if number == 0 else indent) + line, style=style)
            for number, line in enumerate(lines)]


# --- silent hooks, pitfalls, firing order ----------------------------------------------------


def silent_text(walk: DistributedWalk) -> RenderableType:
    """Each group of hooks that never fired, with the ranks and the reason, said out loud."""
    found = silences(walk)
    if not found:
        return Group()
    lines: list[RenderableType] = [Text("hooks that never fired", style="bold underline")]
    for silence in found:
        hook = PARAMETER_TITLES.get(silence.hook, silence.hook)
        lines += _wrapped(f"{hook} on {', '.join(silence.targets)}, on "
                          f"{ranks_text(silence.ranks)}:", INDENT, "yellow")
        lines += _wrapped(silence.why, 2 * INDENT, "")
    lines.append(Text(""))
    return Group(*lines)


PARAMETER_TITLES = {"tensor": "tensor hooks (register_hook)",
                    "post_accumulate_grad": "post-accumulate-grad hooks"}


def pitfalls_text(walk: DistributedWalk) -> RenderableType:
    """What a user would get wrong here, each title and its text with this walk's numbers."""
    if not walk.pitfalls:
        return Group()
    lines: list[RenderableType] = [Text("what you would get wrong", style="bold underline")]
    for pitfall in walk.pitfalls:
        lines += _wrapped(f"• {pitfall.title}", INDENT + 2, "bold", INDENT)
        lines += _wrapped(pitfall.text, INDENT + 2, "")
    lines.append(Text(""))
    return Group(*lines)


def order_text(walk: DistributedWalk) -> RenderableType:
    """Each rank's full pass in firing order (module forward and backward, parameter hooks,
    DDP's buckets), once when the ranks agree, rank by rank where they differ."""
    orders = firing_orders(walk)
    if not orders:
        return Group()
    differs = first_difference(orders)
    title = Text("firing order of the full pass", style="bold underline")
    title.append(" (pre-hooks and node hooks left out: --timeline shows every call)",
                 style="dim")
    lines: list[RenderableType] = [title]
    if differs is None:
        lines.append(Text(f"  the same on {ranks_text(orders[0].ranks)}", style="dim"))
    else:
        lines.append(Text(f"  the ranks' orders differ from step {differs + 1} on",
                          style="yellow"))
    for order in orders:
        lead = "" if differs is None else f"{ranks_text(order.ranks)}: "
        lines += _wrapped(lead + " → ".join(order.steps), 2 * INDENT, "", INDENT)
    lines.append(Text(""))
    return Group(*lines)



# --- each rank's timelines -------------------------------------------------------------------


def _rank_timeline(rank: RankWalk, collapse: bool) -> RenderableType:
    """Every pass of the rank's own walk, as the single-process timeline shows it, with DDP's
    bucket calls after the hook calls they followed."""
    parts: list[RenderableType] = []
    for walk_pass in rank.walk.passes:
        rank_pass = rank.pass_named(walk_pass.mode)
        after: dict[int | None, list[RenderableType]] = {}
        for bucket in () if rank_pass is None else rank_pass.buckets:
            after.setdefault(bucket.after_seq, []).append(_bucket(bucket))
        title = f"rank {rank.rank}: {PASS_TITLES[walk_pass.mode]}"
        parts.append(pass_text(walk_pass, collapse, title, after))
    return Group(*parts)


def _bucket(bucket: CheckedBucket) -> RenderableType:
    """One call of DDP's communication hook: each slot before and after the all-reduce."""
    head = Text.assemble(("    ⇄ ", "dim"), ("comm hook", "bold"), " ",
                         (f"bucket {bucket.index}", "cyan"),
                         f": DDP's all-reduce of {len(bucket.slots)} parameters")
    rows = []
    for slot in bucket.slots:
        changed = f"changed by your hook {slot.changed_by}" if slot.changed_by else None
        rows += [Row(f"{slot.parameter} before", "this rank's own", slot.before,
                     check_mark(slot.before_check, changed)),
                 Row(f"{slot.parameter} after", "the sum over ranks", slot.after,
                     check_mark(slot.after_check, changed or (
                         None if slot.after is not None else "the all-reduce never completed")))]
    return Group(head, Padding(Rows(tuple(rows), Columns.of(rows)), (0, 0, 0, 6)))


__all__ = ["answer_text", "distributed_text", "order_text", "pitfalls_text", "silent_text"]
