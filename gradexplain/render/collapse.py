"""Folding repeated blocks: which items of a long sequence to print in full and which to sum up.

A deep model (fifty identical MLP blocks) walks into thousands of hook events and chain-rule
lines that repeat block after block with only the block index, the node numbers and the values
changed. This module owns finding those repeats; it knows nothing of events, torch or rich. The
caller gives each item a *shape*: a hashable that is equal for two items exactly when they read
the same once values are left out and the numbers that change from block to block are masked
(`shape_key` masks them in a text), or None for an item that must always be printed in full,
such as one whose check failed.

`plan_folds` reads the shapes left to right. At each position it asks, for every period p up to
`max_period`: how many times do the p items from here repeat back to back, shape for shape? It
takes the period that hides the most items, provided at least `min_hidden` repeats would be
hidden, keeps the first repeat (the reader sees the pattern) and the last one (the reader sees
where it ends) in full, and folds the repeats between them, then carries on after the run. With
no such period it shows the item and moves on by one. An item shaped None equals nothing, so no
repeat spans it: a failure is always shown, with the block around it.

Counting repeats is a table lookup: for each period p, `matches[p][j]` is how many consecutive
positions from j on have shape[j] == shape[j + p], filled right to left once. The whole plan
costs O(n · max_period) time and memory, and the same shapes always give the same plan.
"""

from __future__ import annotations

import operator
import re
from array import array
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

# Integer components of a module path: the 3 in `3.linear`, `blocks.3.linear`, `encoder.3:relu`.
# Digits inside a name (`layer1`, `ReluBackward0`) name different things, and digits in brackets
# are argument positions (`grad_input[0]`), so both stay; but a path opening a bracket
# (`[3.linear:addmm > 0]`, a ReLU's mask) is a path. ASCII only, because the transpose mark
# `ᵀ` counts as a letter to `\w`.
_PATH_NUMBER = re.compile(r"(?<![A-Za-z0-9_\[#@])[0-9]+(?![A-Za-z0-9_\]])"
                          r"|(?<=\[)[0-9]+(?=\.[A-Za-z_])")
# Counters that grow from block to block without naming one: autograd node ids (`n17`), the
# n-th call of an op (`add#6`), the n-th version of a tensor (`t@2`).
_COUNTER = re.compile(r"(?<![A-Za-z0-9_])n[0-9]+(?![A-Za-z0-9_])|(?<=[#@])[0-9]+")

MAX_PERIOD = 100
MIN_HIDDEN = 3


def shape_key(text: str) -> str:
    """`node n17 on AddmmBackward0 ∂loss/∂blocks.3.linear:addmm` with what changes from block
    to block masked: `node # on AddmmBackward0 ∂loss/∂blocks.#.linear:addmm`."""
    return _PATH_NUMBER.sub("#", _COUNTER.sub("#", text))


def path_numbers(text: str) -> set[int]:
    """The integer module-path components `shape_key` masks (not counters): {3} for
    `blocks.3.linear`."""
    return {int(number) for number in _PATH_NUMBER.findall(text)}


@dataclass(frozen=True)
class Shown:
    """Items `start` to `stop - 1`, printed in full."""

    start: int
    stop: int


@dataclass(frozen=True)
class Folded:
    """Items `start` to `stop - 1`, summed up: `repeats` back-to-back repeats of `period` items,
    each shaped like the repeat shown just above them; another like it is shown just below."""

    start: int
    stop: int
    period: int

    @property
    def repeats(self) -> int:
        return (self.stop - self.start) // self.period


Step = Shown | Folded


@dataclass(frozen=True)
class Plan:
    """Every item of the sequence, in order, in exactly one step."""

    steps: tuple[Step, ...]

    @property
    def folds(self) -> tuple[Folded, ...]:
        return tuple(step for step in self.steps if isinstance(step, Folded))


def plan_folds(shapes: Sequence[Hashable | None], *, max_period: int = MAX_PERIOD,
               min_hidden: int = MIN_HIDDEN) -> Plan:
    """Which items to show and which runs of repeats to fold (see the module docstring)."""
    count = len(shapes)
    ids = _shape_ids(shapes)
    # A run worth folding has min_hidden + 2 repeats (the first and last stay shown).
    longest = min(max_period, count // (min_hidden + 2))
    matches = {period: _match_lengths(ids, period) for period in range(1, longest + 1)
               if _may_fold(ids, period, min_hidden)}
    steps: list[Step] = []
    position = 0
    shown_from = 0
    while position < count:
        run = _best_run(matches, position, min_hidden)
        if run is None:
            position += 1
            continue
        period, repeats = run
        hidden_from, hidden_to = position + period, position + (repeats - 1) * period
        steps += [Shown(shown_from, hidden_from), Folded(hidden_from, hidden_to, period)]
        shown_from = hidden_to
        position += repeats * period
    if shown_from < count:
        steps.append(Shown(shown_from, count))
    return Plan(tuple(steps))


def _best_run(matches: dict[int, array[int]], position: int,
              min_hidden: int) -> tuple[int, int] | None:
    """(period, repeats) of the run from `position` that hides the most items, if any hides
    `min_hidden` repeats; on a tie the shortest period (periods are tried shortest first)."""
    best: tuple[int, int] | None = None
    most_hidden = 0
    for period, lengths in matches.items():
        repeats = 1 + lengths[position] // period
        hidden = (repeats - 2) * period
        if repeats - 2 >= min_hidden and hidden > most_hidden:
            best, most_hidden = (period, repeats), hidden
    return best


def show_all(count: int) -> Plan:
    """The plan that folds nothing."""
    return Plan((Shown(0, count),) if count else ())


@dataclass(frozen=True)
class FoldedBlocks:
    """The blocks a fold hides: `whole`, those none of whose items is shown beside the fold;
    `parts`, those with items both hidden and shown (backward interleaves neighbouring blocks, so
    a run of repeats seldom starts where a block does)."""

    whole: range
    parts: tuple[int, ...]


def block_of(text: str) -> int | None:
    """The block an item is about: the first integer path component of its text (its subject:
    the node's output, the hook's target), as in `AddmmBackward0 48.linear:addmm … 47.act`."""
    found = _PATH_NUMBER.search(text)
    return None if found is None else int(found.group())


def folded_blocks(fold: Folded, texts: Sequence[str]) -> FoldedBlocks | None:
    """The blocks `fold` hides, from its items' `texts` (unmasked): each item counts for the
    block it is about (`block_of`). A block is hidden whole when no item of the repeats shown
    just above and below the fold is about it, in part when one is. None when no block is
    hidden whole, or the whole ones are not consecutive."""
    hidden = _blocks(texts[fold.start:fold.stop])
    shown = _blocks(texts[fold.start - fold.period:fold.start])
    shown |= _blocks(texts[fold.stop:fold.stop + fold.period])
    whole = sorted(hidden - shown)
    if not whole or whole[-1] - whole[0] != len(whole) - 1:
        return None
    return FoldedBlocks(range(whole[0], whole[-1] + 1), tuple(sorted(hidden & shown)))


def _blocks(texts: Sequence[str]) -> set[int]:
    return {block for text in texts if (block := block_of(text)) is not None}


def _shape_ids(shapes: Sequence[Hashable | None]) -> list[int]:
    """Each shape as a small int (equal shapes, equal ints); each None as an int of its own."""
    known: dict[Hashable, int] = {}
    ids: list[int] = []
    for index, shape in enumerate(shapes):
        ids.append(-1 - index if shape is None else known.setdefault(shape, len(known)))
    return ids


def _may_fold(ids: Sequence[int], period: int, min_hidden: int) -> bool:
    """Whether a run of `period` can be worth folding: it has (min_hidden + 1) * period
    positions that match one period on, so a period with fewer in the whole sequence has
    none, and its table need not be made (most periods of a long timeline: a 300-layer
    model's events planned in 0.05 s instead of 0.21 s, counted here in C)."""
    matching: int = sum(map(operator.eq, ids, ids[period:]))
    return matching >= (min_hidden + 1) * period


def _match_lengths(ids: Sequence[int], period: int) -> array[int]:
    """How many consecutive positions from each j on have ids[j] == ids[j + period]."""
    lengths = array("l", [0]) * (len(ids) + 1)
    for index in range(len(ids) - period - 1, -1, -1):
        if ids[index] == ids[index + period]:
            lengths[index] = lengths[index + 1] + 1
    return lengths
