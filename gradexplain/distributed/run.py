"""`walk --ranks N`, from the ranks' specs to the DistributedWalk:

    fork N ranks (launch) -> in each: the single-process capture of its own inputs, each pass's
    build wrapped (wrap) -> gather every rank's session -> the single-process reference of
    every rank's inputs (reference) -> each rank read as a distributed walk (label) -> pitfalls

Each rank's session travels to this process pickled (our own forked process, never a file).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from gradexplain.capture.build import Builder
from gradexplain.capture.pipeline import capture
from gradexplain.distributed.label import Setup, rank_walk
from gradexplain.distributed.pitfalls import pitfalls
from gradexplain.distributed.reference import local_grads, reference_grads, reference_records
from gradexplain.distributed.wrap import wrapper
from gradexplain.language.model import ModelSpec
from gradexplain.records.distributed import DistributedWalk
from gradexplain.records.session import Session

if TYPE_CHECKING:
    from gradexplain.distributed.launch import LaunchReport

# The launcher's signature (distributed/launch.py): run `work` in each of N ranks, return what
# each returned and how the ranks ended. A parameter so that a test can run the same plan
# through another one.
Launcher = Callable[[int, Callable[..., bytes]], "LaunchReport"]


@dataclass(frozen=True)
class Plan:
    """What every rank needs: its own spec (and, for a Python model, its builder), the spec
    as written, and how to wrap. Forked ranks inherit it as it is."""

    rank_specs: tuple[ModelSpec, ...]
    spec_path: str
    spec_text: str
    setup: Setup
    makers: tuple[Builder | None, ...] = ()
    max_values: int | None = None
    threads: int | None = 1

    def maker(self, rank: int) -> Builder | None:
        return self.makers[rank] if self.makers else None


def capture_distributed(plan: Plan, launch: Launcher | None = None) -> DistributedWalk:
    """Run the plan on its ranks and read every rank's walk as a distributed one."""
    if launch is None:
        from gradexplain.distributed.launch import launch as launch_ranks

        launch = launch_ranks
    report = launch(plan.setup.world_size, lambda context: _rank_session(plan, context.rank))
    sessions: list[Session] = [pickle.loads(result) for result in report.results]
    with torch.random.fork_rng(devices=[]):
        local = [local_grads(spec, plan.maker(rank))
                 for rank, spec in enumerate(plan.rank_specs)]
    reference = reference_grads(local)
    ranks = tuple(rank_walk(rank, session, reference, local, plan.setup)
                  for rank, session in enumerate(sessions))
    first = sessions[0].walk
    return DistributedWalk(
        spec=first.spec, name=first.name, about=first.about, torch=torch.__version__,
        world_size=plan.setup.world_size, wrap=plan.setup.wrap, backend="gloo",
        ddp=plan.setup.ddp if plan.setup.wrap == "ddp" else None, ranks=ranks,
        reference=reference_records(reference), pitfalls=pitfalls(ranks, plan.setup),
        notes=_notes(plan, report.notes))


def _notes(plan: Plan, launched: Sequence[str]) -> tuple[str, ...]:
    """What the reader should know about how this walk ran that no record says: the
    launcher's (a rank that ended badly after sending its whole result), then the wrapping's."""
    notes = list(launched)
    spec = plan.rank_specs[0]
    lessons = [f"{len(items)} {name}" for name, items in (
        ("intervention(s)", spec.interventions), ("capture(s)", spec.captures)) if items]
    if lessons:
        notes.append(f"the spec's {' and '.join(lessons)} are lessons of the single-process "
                     "walk, not run here: every rank's hooks get what plain DDP or FSDP hands "
                     "them; walk the spec without --ranks to see what they change")
    if plan.setup.wrap == "ddp" and plan.setup.ddp.bucket_cap_mb is not None:
        notes.append(f"bucket_cap_mb={plan.setup.ddp.bucket_cap_mb:g} shows no effect here: in "
                     "its first iteration DDP puts every parameter in one bucket, whatever the "
                     "cap, and rebuilds its buckets by the cap only after it (after the second "
                     "with static_graph); each pass of this walk is a first iteration")
    return tuple(notes)


def _rank_session(plan: Plan, rank: int) -> bytes:
    """Inside rank `rank`: its own walk, each pass's build wrapped."""
    session = capture(plan.rank_specs[rank], plan.spec_path, plan.spec_text, plan.maker(rank),
                      plan.max_values, None, plan.threads,
                      wrap=wrapper(plan.setup.wrap, plan.setup.ddp, plan.setup.world_size))
    return pickle.dumps(session, protocol=pickle.HIGHEST_PROTOCOL)


__all__ = ["Launcher", "Plan", "capture_distributed"]
