"""What `walk --ranks N` hands to the renderers: every rank's own walk, and what the
distribution adds to it. Plain, frozen, JSON-able data; no torch here.

Each rank runs the single-process walk of its own inputs with the model wrapped (DDP or FSDP2),
so every hook argument there is labelled and checked against that rank's own hook-free run:
module, tensor and node hooks see this rank's local gradients, which DDP never touches. What
the wrapping changes is said here, value by value, each with whose derivative it is (`Whose`:
this rank's own, the sum over ranks, or their mean) and checked against single-process runs of
every rank's inputs: DDP's buckets before and after the all-reduce, each `.grad` after backward,
FSDP2's post-accumulate hooks, and the hooks that never fired on a rank.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from gradexplain.language.model import DDPOptions, WrapKind
from gradexplain.records.check import Check, Failure
from gradexplain.records.trace import HookKind, Mode, TensorValue
from gradexplain.records.walk import Walk

# Each wrapping as a reader knows it (what the walk says it ran, and what torch refused).
WRAPPERS: dict[WrapKind, str] = {
    "ddp": "DistributedDataParallel",
    "fsdp": "FSDP2 (fully_shard)",
}

# Whose derivative a value is: this rank's own loss's, or the sum or mean over every rank's.
# "mixed": under DDP, a .grad that holds the mean one backward call wrote plus this rank's own
# gradients of later calls on the same forward (DDP all-reduces once per forward).
Scope = Literal["local", "sum", "mean", "mixed"]


@dataclass(frozen=True)
class Whose:
    """Whose derivative a value is, when it was taken relative to the all-reduce, and, for
    FSDP2, which rows of the parameter this rank's shard holds (`rows`: start, stop)."""

    scope: Scope
    text: str
    when: str
    rows: tuple[int, int] | None = None


@dataclass(frozen=True)
class ScopedArg:
    """One hook argument of the rank's walk (event `seq`, argument `arg`) read as a
    distributed value. Arguments of the rank's walk not listed are its local derivatives."""

    seq: int
    arg: str
    whose: Whose
    check: Check | None
    not_checked: str | None = None


@dataclass(frozen=True)
class BucketSlot:
    """One parameter's slot in a DDP bucket: its gradient as handed to the communication hook
    (this rank's own, unless one of the user's hooks changed it) and after the all-reduce (the
    sum over ranks), each checked against single-process runs."""

    parameter: str
    before: TensorValue | None
    before_check: Check | None
    after: TensorValue | None
    after_check: Check | None
    changed_by: str | None = None  # the user's hook that changed what this rank put in
    not_checked: str | None = None  # why the slot has no checks, where it has none


@dataclass(frozen=True)
class CheckedBucket:
    """One call of DDP's communication hook: bucket `index` of backward call `run`, handed over
    after event `after_seq` of the rank's pass."""

    index: int
    run: int
    after_seq: int | None
    slots: tuple[BucketSlot, ...]


@dataclass(frozen=True)
class DistributedGrad:
    """A leaf's `.grad` after the pass on this rank: whose derivative it is, checked."""

    name: str
    value: TensorValue | None
    whose: Whose
    check: Check | None
    not_checked: str | None = None


@dataclass(frozen=True)
class Silent:
    """A hook the walk registered that never fired on this rank, and why."""

    hook: HookKind
    target: str
    why: str


@dataclass(frozen=True)
class RankPass:
    """What the wrapping adds to one pass of one rank's walk."""

    mode: Mode
    scoped: tuple[ScopedArg, ...]
    buckets: tuple[CheckedBucket, ...]
    grads: tuple[DistributedGrad, ...]
    silent: tuple[Silent, ...]


@dataclass(frozen=True)
class RankWalk:
    """One rank: its inputs, its own walk (labelled and checked against its own hook-free run;
    where the wrapping changed a `.grad`, its checks there, final and per call, are the
    distributed ones of `RankPass.grads`), and what the wrapping added."""

    rank: int
    inputs: tuple[tuple[str, TensorValue | None], ...]
    walk: Walk
    passes: tuple[RankPass, ...]

    def pass_named(self, mode: str) -> RankPass | None:
        return next((item for item in self.passes if item.mode == mode), None)


@dataclass(frozen=True)
class ReferenceGrad:
    """A leaf's gradient in single-process runs of each rank's inputs (hook-free, unwrapped),
    and their mean: what every distributed value is checked against."""

    name: str
    local: tuple[TensorValue | None, ...]
    mean: TensorValue | None


@dataclass(frozen=True)
class Pitfall:
    """Something a user would get wrong about this model under the wrapping, shown by this
    walk's own values: `title` in a few words, `text` the explanation with the numbers."""

    key: str
    title: str
    text: str


@dataclass(frozen=True)
class DistributedWalk:
    """The whole distributed walk: `world_size` ranks of the spec, wrapped in `wrap`."""

    spec: str
    name: str
    about: str | None
    torch: str
    world_size: int
    wrap: WrapKind
    backend: str
    ddp: DDPOptions | None
    ranks: tuple[RankWalk, ...]
    reference: tuple[ReferenceGrad, ...]
    pitfalls: tuple[Pitfall, ...]
    # What the run noticed that is not a check: a rank that exited badly after its results.
    notes: tuple[str, ...] = ()

    def failures(self) -> list[Failure]:
        """Every check that failed: each rank's own walk's, then the distributed ones."""
        return [item for item in self._checked() if not item.check.verified]

    def checks(self) -> list[Check]:
        return [item.check for item in self._checked()]

    def _checked(self) -> Iterator[Failure]:
        # A `.grad`'s distributed check is also the rank walk's own (FinalGrad, LeafGrad):
        # counted there, once.
        for rank in self.ranks:
            prefix = f"rank {rank.rank}: "
            for failure in rank.walk._checked():
                yield Failure(failure.mode, prefix + failure.where, failure.claim,
                              failure.check)
            for rank_pass in rank.passes:
                for arg in rank_pass.scoped:
                    if arg.check is not None:
                        yield Failure(rank_pass.mode, f"{prefix}#{arg.seq} {arg.arg}",
                                      arg.whose.text, arg.check)
                for bucket in rank_pass.buckets:
                    for slot in bucket.slots:
                        where = f"{prefix}bucket {bucket.index}, {slot.parameter}"
                        if slot.before_check is not None:
                            yield Failure(rank_pass.mode, f"{where} before the all-reduce",
                                          "this rank's own gradient", slot.before_check)
                        if slot.after_check is not None:
                            yield Failure(rank_pass.mode, f"{where} after the all-reduce",
                                          "the sum over ranks", slot.after_check)


__all__ = ["WRAPPERS", "BucketSlot", "CheckedBucket", "DistributedGrad", "DistributedWalk",
           "Pitfall", "RankPass", "RankWalk", "ReferenceGrad", "Scope", "ScopedArg", "Silent",
           "Whose"]
