"""When Python's cycle collector runs: paused for work that makes a great many objects and few
cycles (the collector, run every 700 new objects, walks them, and everything else alive, a deep
model's session among it, again and again), and paused while the command line starts. The one
place that turns it off; torch-free and rich-free: the capture, the renderers, the output and
`cli.entry` use it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off for the block, as it was afterwards; whatever cycles the block
    left are collected at the next full collection (`_promote_young`)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _promote_young()
        if was_enabled:
            gc.enable()


# Fewer new objects than this in the youngest generation: walking them costs next to nothing.
_PROMOTE_AT = 10_000


def _promote_young() -> None:
    """Everything the young generations hold moved to the oldest, without walking it.

    The block made hundreds of thousands of objects that outlive it (a deep model's session),
    all still in the youngest generation: the first collection after it walked them all, 14-37
    ms of a 50-layer MLP's 450 ms `explain()`, to find no garbage (a capture makes no cycles).
    `gc.freeze()` then `gc.unfreeze()` moves every generation to the oldest in constant time;
    a cycle among them is collected at the next full collection. Only where nothing else is
    frozen (unfreezing would also unfreeze what its owner froze), and never in `cli.entry`'s
    process, which froze its start-up: there even asking costs a walk of everything frozen
    (16 ms after importing torch), and it freezes what survives its run anyway."""
    if _collection["process"] or gc.get_count()[0] < _PROMOTE_AT:
        return
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


# Whether `pause_collection` paused the garbage collector, for `resume_collection` to undo;
# whether this is `cli.entry`'s process, which ends with os._exit (`freeze_survivors`).
_collection = {"paused": False, "process": False}


def pause_collection() -> None:
    """Python's cyclic garbage collector off while the command starts: for `cli.entry` only,
    a process of its own that ends with os._exit.

    Start-up makes a few million objects that live as long as the process, torch's import most
    of them, and importing them sets off full collections that walk them all: 0.2 s of a 1.3 s
    walk of two_modules on a quiet machine (more on a busy one), when none of them is garbage.
    """
    gc.disable()
    _collection["paused"] = True
    _collection["process"] = True


def resume_collection() -> None:
    """The collector on again for the run (a model's own garbage must be collected), with
    everything start-up made frozen out of its way (`gc.freeze`), if `pause_collection`
    paused it; otherwise (a test calling `cli.main` in its own process) nothing."""
    if _collection["paused"]:
        _collection["paused"] = False
        gc.freeze()
        gc.enable()


def freeze_survivors() -> None:
    """Everything alive now frozen out of the collector's way (`gc.freeze`), in `cli.entry`'s
    process only (elsewhere, nothing): called once a command's one run is done, whose session
    lives until the process ends. Every full collection while it is analysed and rendered
    walked it again (hundreds of thousands of objects for a deep model: a 300-layer timeline's
    text took 1.56x JSON's time with them, 1.16x without). A frozen object is still freed when
    its last reference goes; only a cycle among frozen objects is never collected, which a
    process that ends after printing does not miss. (`report --all` runs many specs and does
    not call this.)"""
    if _collection["process"]:
        gc.freeze()


__all__ = ["collector_paused", "freeze_survivors", "pause_collection", "resume_collection"]
