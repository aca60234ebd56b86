"""Python's cycle collector paused for work that makes a great many objects and few cycles:
the collector, run every 700 new objects, walks them (and everything else alive, a deep
model's session among it) again and again. Torch-free and rich-free: the renderers and the
output use it, and the capture can (capture/pipeline.py has its own copy, `_collector_paused`,
from before this module).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off for the block, as it was afterwards; whatever cycles the block
    left are collected as ever once it is back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


__all__ = ["collector_paused"]
