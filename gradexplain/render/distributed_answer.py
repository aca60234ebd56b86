"""What `walk --ranks N` answers, laid out once for the text and markdown renderers: each
parameter's hook values rank by rank (`answer_rows`), the hooks that never fired (`silences`),
each rank's firing order (`firing_orders`) and the header's facts (`wrapping`, `changed_options`).

Plain frozen data read from the DistributedWalk; no torch, no rich, no markdown here. Values and
checks are the records' own: this module only picks and groups them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from gradexplain.language.model import DDPOptions
from gradexplain.records.check import Check
from gradexplain.records.distributed import (
    WRAPPERS,
    DistributedWalk,
    RankPass,
    RankWalk,
    Whose,
)
from gradexplain.records.paths import module_title
from gradexplain.records.trace import HookKind, TensorValue
from gradexplain.records.walk import LabelledEvent, PassWalk

# What every check of a distributed walk is made against.
CHECKED_AGAINST = "hook-free single-process runs of every rank's inputs"
REFERENCE = "the single-process run"

# Where the ranks meet: the launcher's rendezvous store is always on the loopback address.
HOST = "127.0.0.1"

# The parameter hooks the answer shows, in the order they fire on a parameter, as a user
# registers them.
PARAMETER_HOOKS: dict[HookKind, str] = {
    "tensor": "tensor (register_hook)",
    "post_accumulate_grad": "post_accumulate_grad",
}
GRAD_LABEL = ".grad after backward"
# The hooks the compact firing order shows; pre-hooks and node hooks are the timeline's.
ORDER_HOOKS: frozenset[HookKind] = frozenset(
    {"forward", "backward", "full_backward", "tensor", "post_accumulate_grad"})


@dataclass(frozen=True)
class Cell:
    """One rank's value in an answer row: `fired` False where this rank's hook never fired
    (no value); `not_checked` says why a value has no check."""

    value: TensorValue | None
    check: Check | None
    not_checked: str | None = None
    fired: bool = True


@dataclass(frozen=True)
class AnswerRow:
    """One hook (or bucket slot, or `.grad`) of one parameter: each rank's cell, whose
    derivative the values are and when they were taken, in words shared by the ranks."""

    parameter: str
    label: str
    cells: tuple[Cell, ...]
    whose: str
    when: str


@dataclass(frozen=True)
class AnswerGroup:
    """The rows of one hook (`label`), each parameter's, under the words most of them share:
    a row whose own words differ says them (`differs`)."""

    label: str
    whose: str
    when: str
    rows: tuple[AnswerRow, ...]

    def differs(self, row: AnswerRow) -> bool:
        return (row.whose, row.when) != (self.whose, self.when)


@dataclass(frozen=True)
class Silence:
    """Hooks of one kind that never fired on `targets`, on each of `ranks`, for one reason."""

    hook: HookKind
    targets: tuple[str, ...]
    ranks: tuple[int, ...]
    why: str


@dataclass(frozen=True)
class RankOrder:
    """The firing order of the full pass, the same on each of `ranks`: one step per hook call
    (consecutive calls of one hook kind merged), DDP's buckets where they were handed over."""

    ranks: tuple[int, ...]
    steps: tuple[str, ...]


def wrapping(walk: DistributedWalk) -> str:
    """`2 ranks, DistributedDataParallel, gloo on 127.0.0.1`."""
    return f"{walk.world_size} ranks, {WRAPPERS[walk.wrap]}, {walk.backend} on {HOST}"


def changed_options(options: DDPOptions | None) -> list[str]:
    """The DDP options that differ from torch's defaults, as `name=value`."""
    if options is None:
        return []
    defaults = DDPOptions()
    return [f"{field.name}={getattr(options, field.name)}"
            for field in dataclasses.fields(options)
            if getattr(options, field.name) != getattr(defaults, field.name)]


def main_pass(rank: RankWalk) -> tuple[PassWalk, RankPass] | None:
    """The pass the answer is about: the full pass, else the only one there is."""
    rank_pass = rank.pass_named("full") or (rank.passes[0] if rank.passes else None)
    if rank_pass is None:
        return None
    walk_pass = next((item for item in rank.walk.passes if item.mode == rank_pass.mode), None)
    return None if walk_pass is None else (walk_pass, rank_pass)


def answer_rows(walk: DistributedWalk) -> list[AnswerRow]:
    """Every parameter the wrapping touches, row by row: its tensor and post-accumulate-grad
    hook calls, its DDP bucket slots before and after the all-reduce, its `.grad` after."""
    passes = [main_pass(rank) for rank in walk.ranks]
    rows: list[AnswerRow] = []
    for name in _parameters(passes):
        for hook, label in PARAMETER_HOOKS.items():
            rows += _hook_rows(walk, passes, name, hook, label)
        rows += _bucket_rows(walk, passes, name)
        rows += _grad_rows(walk, passes, name)
    return rows


def answer_groups(rows: Sequence[AnswerRow]) -> list[AnswerGroup]:
    """The rows grouped by hook, in the order the hooks first appear."""
    by_label: dict[str, list[AnswerRow]] = {}
    for row in rows:
        by_label.setdefault(row.label, []).append(row)
    groups = []
    for label, members in by_label.items():
        words = [(row.whose, row.when) for row in members]
        whose, when = max(words, key=words.count)
        groups.append(AnswerGroup(label, whose, when, tuple(members)))
    return groups


def _parameters(passes: Sequence[tuple[PassWalk, RankPass] | None]) -> list[str]:
    """The leaves the wrapping touches (a hook of theirs read as distributed, a bucket slot, a
    `.grad` that is not a rank's own, a silent hook), in the order `.grad` lists them."""
    touched: dict[str, None] = {}
    for item in passes:
        if item is None:
            continue
        walk_pass, rank_pass = item
        events = {event.seq: event for event in walk_pass.events}
        touched.update((events[arg.seq].target, None) for arg in rank_pass.scoped
                       if arg.seq in events)
        touched.update((slot.parameter, None) for bucket in rank_pass.buckets
                       for slot in bucket.slots)
        touched.update((grad.name, None) for grad in rank_pass.grads
                       if grad.whose.scope != "local")
        touched.update((silent.target, None) for silent in rank_pass.silent)
    order = [grad.name for item in passes if item is not None for grad in item[1].grads]
    return sorted(touched, key=lambda name: order.index(name) if name in order else len(order))


def _hook_rows(walk: DistributedWalk, passes: Sequence[tuple[PassWalk, RankPass] | None],
               name: str, hook: HookKind, label: str) -> list[AnswerRow]:
    calls = [[] if item is None else [event for event in item[0].events
                                      if event.hook == hook and event.target == name]
             for item in passes]
    silent = [item is not None and any(s.hook == hook and s.target == name for s in item[1].silent)
              for item in passes]
    count = max((len(events) for events in calls), default=0)
    if not count and not any(silent):
        return []
    rows = []
    for call in range(max(count, 1)):
        cells: list[Cell] = []
        whose: list[Whose | None] = []
        for rank, (item, events) in enumerate(zip(passes, calls, strict=True)):
            if call >= len(events) or item is None:
                cells.append(Cell(None, None, fired=False))
                whose.append(None)
                continue
            cell, scoped = _event_cell(events[call], item[1], walk.ranks[rank].rank)
            cells.append(cell)
            whose.append(scoped)
        if all(not cell.fired for cell in cells):
            phrase, when = "", "never fired (below: why)"
        else:
            phrase, when = _shared_words(whose, walk)
        rows.append(AnswerRow(name, _numbered(label, call, count), tuple(cells), phrase, when))
    return rows


def _event_cell(event: LabelledEvent, rank_pass: RankPass, rank: int) -> tuple[Cell, Whose]:
    """A hook call's first argument, its check the distributed one where there is one, else
    the rank walk's own (against that rank's hook-free run)."""
    arg = event.args[0] if event.args else None
    scoped = next((item for item in rank_pass.scoped if item.seq == event.seq), None)
    whose = scoped.whose if scoped is not None else Whose(
        "local", f"rank {rank}'s own gradient", "")
    if arg is None:
        return Cell(None, None, "no argument"), whose
    check = scoped.check if scoped is not None and scoped.check is not None else arg.check
    not_checked = (scoped.not_checked if scoped is not None and scoped.not_checked
                   else arg.not_checked)
    if arg.meaning is not None and arg.meaning.modified_by is not None:
        check, not_checked = None, f"changed by your hook {arg.meaning.modified_by}"
    return Cell(arg.value, check, not_checked), whose


def _bucket_rows(walk: DistributedWalk, passes: Sequence[tuple[PassWalk, RankPass] | None],
                 name: str) -> list[AnswerRow]:
    """Each bucket holding `name`, before and after the all-reduce, matched across ranks by
    (call, bucket)."""
    keys: dict[tuple[int, int], None] = {}
    for item in passes:
        for bucket in () if item is None else item[1].buckets:
            if any(slot.parameter == name for slot in bucket.slots):
                keys[(bucket.run, bucket.index)] = None
    runs = {run for run, _ in keys}
    rows = []
    for run, index in keys:
        slots = []
        for item in passes:
            buckets = () if item is None else item[1].buckets
            slots.append(next((slot for bucket in buckets if (bucket.run, bucket.index)
                               == (run, index) for slot in bucket.slots
                               if slot.parameter == name), None))
        label = f"bucket {index}" + (f" (call {run})" if len(runs) > 1 else "")
        changed = [slot.changed_by for slot in slots if slot is not None and slot.changed_by]
        before = tuple(Cell(None, None, fired=False) if slot is None else Cell(
            slot.before, slot.before_check,
            f"changed by your hook {slot.changed_by}" if slot.changed_by else slot.not_checked)
            for slot in slots)
        after = tuple(Cell(None, None, fired=False) if slot is None else Cell(
            slot.after, slot.after_check,
            f"changed by your hook {slot.changed_by}" if slot.changed_by
            else slot.not_checked if slot.after is not None
            else "the all-reduce never completed")
            for slot in slots)
        own = "each rank's own" + (f" (changed by your hook {changed[0]})" if changed else "")
        rows += [
            AnswerRow(name, f"{label} before", before, own,
                      "handed to DDP's communication hook, before the all-reduce"),
            AnswerRow(name, f"{label} after", after, f"the sum over {walk.world_size} ranks",
                      "after the all-reduce, before DDP divides by the world size")]
    return rows


def _grad_rows(walk: DistributedWalk, passes: Sequence[tuple[PassWalk, RankPass] | None],
               name: str) -> list[AnswerRow]:
    grads = [None if item is None else next(
        (grad for grad in item[1].grads if grad.name == name), None) for item in passes]
    if all(grad is None for grad in grads):
        return []
    cells = tuple(Cell(None, None, fired=False) if grad is None
                  else Cell(grad.value, grad.check, grad.not_checked) for grad in grads)
    phrase, when = _shared_words([None if grad is None else grad.whose for grad in grads], walk)
    return [AnswerRow(name, GRAD_LABEL, cells, phrase, when)]


def _numbered(label: str, call: int, count: int) -> str:
    return label if count < 2 else f"{label} (call {call + 1})"


def _shared_words(whose: Sequence[Whose | None], walk: DistributedWalk) -> tuple[str, str]:
    """Whose derivative the ranks' values are and when, in words every rank shares where they
    agree (`each rank's own`), rank by rank where they do not."""
    present = [(rank.rank, item) for rank, item in zip(walk.ranks, whose, strict=True)
               if item is not None]
    scopes = {item.scope for _, item in present}
    if len(scopes) == 1:
        phrase = _scope(next(iter(scopes)), walk.world_size)
        rows = [(rank, item.rows) for rank, item in present if item.rows is not None]
        if rows:
            phrase += ", sharded: " + ", ".join(f"rank {rank} rows {start}:{stop}"
                                                for rank, (start, stop) in rows)
    else:
        phrase = "; ".join(f"rank {rank}: {_scope(item.scope, walk.world_size, True)}"
                           for rank, item in present)
    whens = list(dict.fromkeys(item.when for _, item in present if item.when))
    if len(whens) <= 1:
        when = whens[0] if whens else ""
    else:
        when = "; ".join(f"rank {rank}: {item.when}" for rank, item in present)
    return phrase, when


def refusing_ranks(walk: DistributedWalk) -> list[RankWalk]:
    """The ranks where torch refused a backward call: their calls are shown, each error
    explained (what a single-process walk shows in its calls section)."""
    return [rank for rank in walk.ranks if any(step.error is not None for step in rank.walk.runs)]


def _scope(scope: str, world_size: int, one_rank: bool = False) -> str:
    if scope == "local":
        return "its own" if one_rank else "each rank's own"
    if scope == "mixed":
        own = "its own" if one_rank else "each rank's own"
        return f"the mean over {world_size} ranks of an earlier call, plus {own} of later calls"
    return f"the {scope} over {world_size} ranks"


def words(item: AnswerRow | AnswerGroup) -> str:
    """`whose · when`, as a row or a group says it."""
    return " · ".join(part for part in (item.whose, item.when) if part)


def ranks_text(ranks: Sequence[int]) -> str:
    """`rank 0`, `ranks 0 and 1`, `ranks 0, 1 and 2`."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(rank) for rank in ranks[:-1]) + f" and {ranks[-1]}"


def silences(walk: DistributedWalk) -> list[Silence]:
    """The hooks that never fired in the answer's pass, grouped: one entry per hook kind and
    reason, with the parameters and the ranks it holds for."""
    by_rank: dict[tuple[HookKind, str, tuple[str, ...]], list[int]] = {}
    for rank in walk.ranks:
        item = main_pass(rank)
        if item is None:
            continue
        groups: dict[tuple[HookKind, str], list[str]] = {}
        for silent in item[1].silent:
            groups.setdefault((silent.hook, silent.why), []).append(silent.target)
        for (hook, why), targets in groups.items():
            by_rank.setdefault((hook, why, tuple(targets)), []).append(rank.rank)
    return [Silence(hook, targets, tuple(ranks), why)
            for (hook, why, targets), ranks in by_rank.items()]


def firing_orders(walk: DistributedWalk) -> list[RankOrder]:
    """Each rank's full pass in firing order, ranks with the same order together (one entry
    when every rank's is the same)."""
    orders: dict[tuple[str, ...], list[int]] = {}
    for rank in walk.ranks:
        item = main_pass(rank)
        if item is not None:
            orders.setdefault(_steps(rank, *item), []).append(rank.rank)
    return [RankOrder(tuple(ranks), steps) for steps, ranks in orders.items()]


def _steps(rank: RankWalk, walk_pass: PassWalk, rank_pass: RankPass) -> tuple[str, ...]:
    buckets: dict[int | None, list[str]] = {}
    for bucket in rank_pass.buckets:
        names = ", ".join(slot.parameter for slot in bucket.slots)
        buckets.setdefault(bucket.after_seq, []).append(
            f"comm hook bucket {bucket.index} ({names})")
    kinds = {step.run: step.kind for step in rank.walk.runs}
    steps: list[str] = list(buckets.get(None, ()))
    last: HookKind | None = None
    run = 0
    for event in walk_pass.events:
        if event.run != run and run in kinds:
            steps.append(f"{_call(kinds[run])} returns")
            last = None
        run = event.run
        if event.hook in ORDER_HOOKS:
            title = module_title(event.target)
            if event.hook == last:
                steps[-1] += f", {title}"
            else:
                steps.append(f"{event.hook} {title}")
                last = event.hook
        if event.seq in buckets:
            steps += buckets[event.seq]
            last = None
    if run in kinds:
        steps.append(f"{_call(kinds[run])} returns")
    return tuple(steps)


def _call(kind: str) -> str:
    return "backward()" if kind == "backward" else "autograd.grad()"


def first_difference(orders: Sequence[RankOrder]) -> int | None:
    """The first step at which the ranks' orders differ (None: the same on every rank)."""
    if len(orders) < 2:
        return None
    steps = [order.steps for order in orders]
    for index in range(max(len(item) for item in steps)):
        if len({item[index] if index < len(item) else None for item in steps}) > 1:
            return index
    return None


__all__ = [
    "CHECKED_AGAINST",
    "GRAD_LABEL",
    "HOST",
    "PARAMETER_HOOKS",
    "REFERENCE",
    "AnswerGroup",
    "AnswerRow",
    "Cell",
    "RankOrder",
    "Silence",
    "answer_groups",
    "answer_rows",
    "changed_options",
    "firing_orders",
    "first_difference",
    "main_pass",
    "ranks_text",
    "silences",
    "words",
    "wrapping",
]
