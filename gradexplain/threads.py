"""How many threads torch computes with during a capture: the default, its bound, and the one
place that sets it (and puts the caller's setting back).

One intra-op thread unless the caller asks otherwise. Tiny models gain nothing from threads,
and on a busy machine they stall: a walk of a 50-layer MLP took 14-52 s with torch's default
threads on a busy 2-core machine, and 3.3-4.8 s with one (`python bench/bench.py --only
threads` measures it side by side). And the last bits of a matmul or a reduction depend on
how the work is split between threads: with one, the same spec gives the same bytes whatever
OMP_NUM_THREADS or MKL_NUM_THREADS say. torch is imported only when a count is set, so this
module is as light as the command line's start-up needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gradexplain.errors import UsageError

DEFAULT_THREADS = 1
# More than this is a typo, not a wish: torch would try to start them all.
MAX_THREADS = 1024


def check_threads(threads: int | None, what: str) -> None:
    """A UsageError naming `what` (the option or parameter the user gave) unless `threads` is
    None or a whole number from 1 to MAX_THREADS."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or not (
            1 <= threads <= MAX_THREADS):
        raise UsageError(f"{what} {threads!r}: give a whole number from 1 to {MAX_THREADS:,} "
                         f"({DEFAULT_THREADS}, the default, suits tiny models best)")


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to `count` inside, the caller's restored after
    (None: left alone)."""
    if count is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
