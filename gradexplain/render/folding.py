"""Folding a deep model's repeated blocks in text output: runs of items (timeline events, chain
-rule steps, answer rows) that differ only in block numbers and values become one note each
(`collapse.py` plans the runs; `--all-blocks` turns folding off).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rich.console import RenderableType
from rich.text import Text

from gradexplain.render.collapse import (
    Folded,
    FoldedBlocks,
    Shown,
    folded_blocks,
    plan_folds,
)

Item = TypeVar("Item")


@dataclass(frozen=True)
class Outline:
    """An item as the folding sees it: `text`, what it prints bar values
    and sequence numbers; `shape`, what must match for two items to read alike (None for an
    item with a failed check: never folded); `checks`, how many checks it shows."""

    text: str
    shape: Hashable | None
    checks: int


def fold_repeats(items: Sequence[Item], render: Callable[[Item], RenderableType],
                     outline: Callable[[Item], Outline], what: str,
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
            parts.append(fold_note(step, folded_blocks(step, texts), what, checks))
    return parts


def fold_note(fold: Folded, blocks: FoldedBlocks | None, what: str, checks: int) -> Text:
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


__all__ = ["Outline", "fold_note", "fold_repeats"]
