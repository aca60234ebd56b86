"""The single-process walks a distributed walk is set beside (`diff --ranks N`): each rank's
own spec walked in this process as `gradexplain walk` walks it, unwrapped and unlaunched, so
that what the wrapping changes is all that differs between the two.
"""

from __future__ import annotations

from gradexplain.capture.pipeline import capture
from gradexplain.distributed.run import Plan
from gradexplain.records.walk import Walk


def single_walks(plan: Plan) -> tuple[Walk, ...]:
    """Every rank's own walk, rank by rank: its spec (and, for a Python model, its builder)
    captured in one process, with no wrapping."""
    return tuple(capture(spec, plan.spec_path, plan.spec_text, plan.maker(rank),
                         plan.max_values, None, plan.threads).walk
                 for rank, spec in enumerate(plan.rank_specs))


__all__ = ["single_walks"]
