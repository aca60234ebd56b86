"""What a parameter's `.grad` is on every rank across a pass's backward calls under DDP,
computed from single-process runs of every rank's inputs and the calls whose buckets the run
all-reduced (read from its recorded communication hook calls, never from values).

DDP all-reduces once per forward: in the first backward call after it, each bucket holds the
parameter's accumulated `.grad` and DDP writes the mean back; a later call on the same graph
(retain_graph) only accumulates this rank's own gradient on top. Which calls were all-reduced
is what the run recorded; what each call adds, and the sums and means, are computed here from
the single-process runs alone, so a wrong claim about a `.grad` cannot pass its check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gradexplain.distributed.reference import LocalRun, mean_over_ranks

Grads = tuple[torch.Tensor | None, ...]  # one per rank


@dataclass(frozen=True)
class Accumulated:
    """A parameter's `.grad` on every rank: as each all-reduced call handed it to DDP's bucket
    (`handed`, by call number), and after each call (`after`, by call number)."""

    handed: dict[int, Grads]
    after: dict[int, Grads]


def accumulated(runs: Sequence[LocalRun], name: str, reduced: set[int]) -> Accumulated | None:
    """`name`'s `.grad` on every rank, call by call (calls numbered from 1, as the pass numbers
    its backward calls), the calls in `reduced` all-reduced; None where the ranks' runs did
    not make the same calls (one stopped early)."""
    counts = {len(run.calls) for run in runs}
    if len(counts) != 1:
        return None
    grads: list[torch.Tensor | None] = [None] * len(runs)
    handed: dict[int, Grads] = {}
    after: dict[int, Grads] = {}
    for number in range(1, counts.pop() + 1):
        for rank, run in enumerate(runs):
            call = run.calls[number - 1]
            base = None if call.zeroed else grads[rank]
            added = call.added.get(name)
            grads[rank] = (base if added is None else added.double() if base is None
                           else base + added.double())
        if number in reduced:
            handed[number] = tuple(grads)
            grads = [mean_over_ranks(grads)] * len(runs)
        after[number] = tuple(grads)
    return Accumulated(handed, after)


__all__ = ["Accumulated", "accumulated"]
