"""Distributed walks and their diffs against single-process walks, for the tests of
`analysis/distributed_diff.py` and its renderers: each a Plan run through `capture_distributed`
(2 ranks, 2-4 s each), then `single_walks` of the same plan, then `distributed_diff`.

The models: the facts file's (tests/distributed/test_walk_labels.py's spec, each rank its own
input), and models of our own, as Python models: a 2-layer MLP with a batch per rank, and one
that uses a parameter on rank 1 only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from gradexplain.capture.pymodel import python_source
from gradexplain.distributed.label import Setup
from gradexplain.distributed.plan import spec_plan, split_batch
from gradexplain.distributed.run import Plan
from gradexplain.distributed.single import ranks_diff, single_walks
from gradexplain.language import load_spec_text
from gradexplain.language.model import DDPOptions, WrapKind
from gradexplain.records.distributed import DistributedWalk
from gradexplain.records.distributed_diff import DistributedDiff, PassChange, RankChange
from gradexplain.records.walk import Walk
from tests.distributed.test_walk_labels import (
    DEFAULTS,
    FACTS_SPEC,
    MLP,
    OneRankOnly,
)

# A batch of 4 rows: 2 per rank.
MLP_BATCH = torch.randn(4, 3, generator=torch.Generator().manual_seed(11))
# Rank 0's row is negative first (OneRankOnly skips `extra` there), rank 1's positive.
ONE_RANK_BATCH = torch.tensor([[-1.0, 2.0], [3.0, 0.5]])


@dataclass(frozen=True)
class DiffRun:
    """A plan's distributed walk, its single-process walks and the diff of the two."""

    singles: tuple[Walk, ...]
    walk: DistributedWalk
    diff: DistributedDiff

    def rank(self, rank: int) -> RankChange:
        return self.diff.ranks[rank]

    def pass_change(self, rank: int, mode: str) -> PassChange:
        return next(item for item in self.rank(rank).passes if item.mode == mode)


def run(plan: Plan) -> DiffRun:
    """The plan's distributed walk and diff (`ranks_diff`), with the single walks again."""
    walk, diff = ranks_diff(plan)
    return DiffRun(single_walks(plan), walk, diff)


def facts_fixture(wrap: WrapKind) -> Callable[[], DiffRun]:
    """A module-scoped fixture named `wrap`: the facts model under DDP or FSDP2, run once per
    test module that sets `ddp = facts_fixture("ddp")`."""

    @pytest.fixture(scope="module", name=wrap)
    def made() -> DiffRun:
        return run(facts_plan(wrap))

    return made


def facts_plan(wrap: WrapKind, options: DDPOptions = DEFAULTS) -> Plan:
    """The facts model on 2 ranks, each with its own input (the spec's `distributed:`)."""
    spec = load_spec_text(FACTS_SPEC, "facts.yaml")
    if options != DEFAULTS:
        assert spec.distributed is not None
        spec = dataclasses.replace(spec, distributed=dataclasses.replace(spec.distributed,
                                                                         ddp=options))
    return spec_plan(spec, "facts.yaml", FACTS_SPEC, 2, wrap, None, 1)


def python_plan(model: nn.Module, batch: torch.Tensor, wrap: WrapKind,
                options: DDPOptions = DEFAULTS) -> Plan:
    """`model` on 2 ranks, each with its half of `batch`, `loss = out.sum()`."""
    sources = [python_source(model, inputs, "test:model")
               for inputs in split_batch((batch,), 2)]
    return Plan(tuple(item.spec for item in sources), "test:model", sources[0].description,
                Setup(2, wrap, options), tuple(item.build for item in sources), 1000, 1)


def mlp_plan(wrap: WrapKind) -> Plan:
    return python_plan(MLP(), MLP_BATCH, wrap)


def one_rank_plan() -> Plan:
    return python_plan(OneRankOnly(), ONE_RANK_BATCH, "ddp",
                       DDPOptions(find_unused_parameters=True))


__all__ = ["MLP_BATCH", "ONE_RANK_BATCH", "DiffRun", "facts_fixture", "facts_plan", "mlp_plan",
           "one_rank_plan", "python_plan", "run"]
