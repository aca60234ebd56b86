"""The single-process walks a distributed walk is set beside (`diff --ranks N`): each rank's
own spec walked in this process as `gradexplain walk` walks it, unwrapped and unlaunched, so
that what the wrapping changes is all that differs between the two; and the two set side by
side (`ranks_diff`), what `diff --ranks N` and `report --ranks N` show.
"""

from __future__ import annotations

from gradexplain.analysis.distributed_diff import distributed_diff
from gradexplain.capture.pipeline import capture
from gradexplain.distributed.run import Launcher, Plan, capture_distributed
from gradexplain.records.distributed import DistributedWalk
from gradexplain.records.distributed_diff import DistributedDiff
from gradexplain.records.walk import Walk


def single_walks(plan: Plan) -> tuple[Walk, ...]:
    """Every rank's own walk, rank by rank: its spec (and, for a Python model, its builder)
    captured in one process, with no wrapping."""
    return tuple(capture(spec, plan.spec_path, plan.spec_text, plan.maker(rank),
                         plan.max_values, None, plan.threads).walk
                 for rank, spec in enumerate(plan.rank_specs))


def ranks_diff(plan: Plan, launch: Launcher | None = None) -> tuple[DistributedWalk,
                                                                     DistributedDiff]:
    """The plan run on its ranks (the distributed walk, whose failed checks decide the exit
    code), and each rank's single-process walk set beside it."""
    walk = capture_distributed(plan, launch)
    return walk, distributed_diff(single_walks(plan), walk)


__all__ = ["ranks_diff", "single_walks"]
