"""Every rank's walk read as a distributed one: whose derivative each value the wrapping
touches is (this rank's own, the sum or the mean over ranks, a shard of the mean), where it
was taken relative to the all-reduce, and its check against the single-process reference.

The rank's own walk already labels and checks every hook argument against that rank's own
hook-free run: module, tensor and node hooks see local gradients under DDP, and those checks
stand. What this stage adds is decided from what the run recorded, never from values:
- DDP: a parameter whose bucket the communication hook all-reduced ends with the mean over
  ranks; one in no completed bucket (no_sync, a reduction DDP never finished) keeps its own.
- FSDP2: a parameter's `.grad` and its post-accumulate hook hold this rank's rows of the mean
  (FSDP2 reduce-scatters along dim 0, in torch.chunk's parts); its tensor hooks never fire.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

from gradexplain.capture.checks import check, says_too_little
from gradexplain.distributed.accumulate import Accumulated, accumulated
from gradexplain.distributed.reference import LocalRun, summed
from gradexplain.language.model import DDPOptions, WrapKind
from gradexplain.records.check import Check
from gradexplain.records.distributed import (
    BucketSlot,
    CheckedBucket,
    DistributedGrad,
    RankPass,
    RankWalk,
    ScopedArg,
    Silent,
    Whose,
)
from gradexplain.records.session import Session
from gradexplain.records.trace import BucketCall, PassTrace, TensorValue
from gradexplain.records.walk import FinalGrad, LabelledEvent, PassWalk, RunStep

# Each leaf's gradient in single-process runs of every rank's inputs, and their mean.
Reference = dict[str, tuple[tuple[torch.Tensor | None, ...], torch.Tensor | None]]


@dataclass(frozen=True)
class Setup:
    """How the walk ran: the world size, the wrapping and its options."""

    world_size: int
    wrap: WrapKind
    ddp: DDPOptions


def rank_walk(rank: int, session: Session, reference: Reference, runs: Sequence[LocalRun],
              setup: Setup) -> RankWalk:
    """One rank's session read as part of the distributed walk; `runs` are every rank's
    single-process runs (`reference` their final gradients and mean)."""
    parameters = _parameters(session)
    passes = []
    walk_passes = []
    readings = []
    for walk_pass in session.walk.passes:
        trace = session.trace(walk_pass.mode)
        assert trace is not None
        reading = _Reading(rank, trace, walk_pass, parameters, reference, runs, setup)
        rank_pass = reading.ddp() if setup.wrap == "ddp" else reading.fsdp()
        passes.append(rank_pass)
        readings.append(reading)
        walk_passes.append(_with_grads(walk_pass, rank_pass))
    # The walk's calls are the legacy pass's (capture.passes.run_steps).
    walk = dataclasses.replace(session.walk, passes=tuple(walk_passes),
                              runs=readings[0].runs_with_grads(session.walk.runs)
                              if readings else session.walk.runs)
    inputs = tuple((name, None if (record := session.traces[0].named(name)) is None
                    else record.value) for name in session.inputs)
    return RankWalk(rank, inputs, walk, tuple(passes))


def _parameters(session: Session) -> list[str]:
    """The leaves that are the model's parameters (every leaf but its inputs) that require
    grad, in the order the pass recorded their `.grad`."""
    trace = session.traces[0]
    inputs = set(session.inputs)
    return [name for name, _ in trace.grads
            if name not in inputs and (record := trace.named(name)) is not None
            and record.requires_grad]


class _Reading:
    """One pass of one rank, read against the reference."""

    def __init__(self, rank: int, trace: PassTrace, walk_pass: PassWalk,
                 parameters: list[str], reference: Reference, runs: Sequence[LocalRun],
                 setup: Setup) -> None:
        self.rank = rank
        self.trace = trace
        self.walk_pass = walk_pass
        self.parameters = parameters
        self.reference = reference
        self.local_runs = runs
        self.setup = setup
        self.accumulations: dict[str, Accumulated | None] = {}
        self.ranks = f"{setup.world_size} ranks"
        backward = [run for run in trace.runs if run.kind == "backward"]
        # FSDP2's values are checked in a pass of one backward call (one reduce-scatter); DDP's
        # across any number of calls (`accumulate`).
        self.one_backward = (len(backward) == 1 and not backward[0].failed
                             and not trace.runs[-1].failed)
        self.no_backward = not backward

    # --- DDP ----------------------------------------------------------------------------

    def ddp(self) -> RankPass:
        buckets = tuple(self.bucket(bucket) for bucket in self.trace.buckets)
        grads = tuple(self.ddp_grad(grad) for grad in self.walk_pass.grads)
        scoped = tuple(self.ddp_scoped(event) for event in self.walk_pass.events
                       if event.hook in ("tensor", "post_accumulate_grad")
                       and event.target in self.parameters and event.args)
        reduced = {name for name in self.parameters if self.reduced_calls(name)}
        return RankPass(self.walk_pass.mode, scoped, buckets, grads, self.silent(reduced))

    def reduced_calls(self, name: str) -> set[int]:
        """The backward calls in which DDP all-reduced a bucket holding `name` (recorded)."""
        return {bucket.run for bucket in self.trace.buckets if name in bucket.parameters
                and any(item is not None for item in bucket.after)}

    def accumulated(self, name: str) -> Accumulated | None:
        """`name`'s .grad on every rank, call by call, from the single-process runs (computed
        once per parameter: its buckets, its .grad and each call ask); None where a call
        failed (the single-process run stops there, the pass goes on)."""
        if name not in self.accumulations:
            self.accumulations[name] = (
                None if any(run.failed for run in self.trace.runs)
                else accumulated(self.local_runs, name, self.reduced_calls(name)))
        return self.accumulations[name]

    def bucket(self, call: BucketCall) -> CheckedBucket:
        slots = []
        for name, before, after in zip(call.parameters, call.before, call.after, strict=True):
            changed_by = self.changed_by(name)
            found = self.accumulated(name)
            handed = None if found is None else found.handed.get(call.run)
            if changed_by is not None or handed is None:
                why = None if changed_by is not None else "a backward call of the pass failed"
                slots.append(BucketSlot(name, before, None, after, None, changed_by, why))
                continue
            after_check = (None if after is None or says_too_little(after)
                           else _check(after, summed(handed)))
            before_check = (None if says_too_little(before)
                            else _check(before, handed[self.rank]))
            slots.append(BucketSlot(name, before, before_check, after, after_check))
        return CheckedBucket(call.index, call.run, call.after_seq, tuple(slots))

    def ddp_grad(self, grad: FinalGrad) -> DistributedGrad:
        if grad.name not in self.parameters:
            whose = Whose("local", f"rank {self.rank}'s own gradient",
                          "an input's gradient: DDP synchronises parameters only")
            return DistributedGrad(grad.name, grad.value, whose, grad.check)
        if self.no_backward:
            return self.never_written(grad)
        whose = self.ddp_whose(grad.name)
        if grad.value is None and whose.scope == "mean":
            # All-reduced buckets wrote no gradient here: no rank's forward used it, and
            # find_unused_parameters marks it ready without one (it was "the mean over ranks
            # ... DDP wrote the averaged bucket into .grad", of a .grad that is None).
            whose = Whose("local", f"no gradient on rank {self.rank} (.grad is None)",
                          "no rank's forward used it, so DDP wrote nothing into its .grad")
        changed_by = grad.modified_by or self.changed_by(grad.name)
        if changed_by is not None:
            return DistributedGrad(grad.name, grad.value, whose, None,
                                   f"changed by your hook {changed_by}")
        found = self.accumulated(grad.name)
        if found is None or not found.after:
            return DistributedGrad(grad.name, grad.value, whose, None,
                                   "a backward call of the pass failed")
        expected = found.after[max(found.after)][self.rank]
        return DistributedGrad(grad.name, grad.value, whose, *_checked(grad.value, expected))

    def ddp_whose(self, name: str) -> Whose:
        """Whose gradient `name`'s .grad is at the end of the pass, from the calls DDP
        all-reduced and the zeroing between calls."""
        reduced = self.reduced_calls(name)
        calls = [run for run in self.trace.runs if run.kind == "backward"]
        own = f"rank {self.rank}'s own gradient"
        if not reduced:
            why = ("inside no_sync(): DDP all-reduced nothing" if self.setup.ddp.no_sync
                   else "DDP all-reduced no bucket holding it in this pass")
            return Whose("local", own, why)
        last = max(reduced)
        later = [run for run in calls if run.index > last]
        mean = f"the mean over {self.ranks} of each rank's own gradient"
        if not later:
            return Whose("mean", mean, "after the all-reduce: DDP wrote the averaged bucket "
                         "into .grad when backward finished")
        when = (f"DDP all-reduces once per forward, in call {last}; the calls after it only "
                "accumulate this rank's own gradient")
        if any(run.fresh for run in later):
            return Whose("local", own + " (zeroed since the all-reduce)", when)
        return Whose("mixed", f"{mean} (call {last}), plus {own} of the calls after it",
                     when)

    def ddp_scoped(self, event: LabelledEvent) -> ScopedArg:
        launched = sorted({bucket.index for bucket in self.trace.buckets
                           if bucket.run == event.run and bucket.after_seq is not None
                           and bucket.after_seq < event.seq})
        earlier = [bucket.run for bucket in self.trace.buckets if bucket.run < event.run]
        if self.setup.ddp.no_sync:
            when = "inside no_sync(): no all-reduce in this pass"
        elif earlier and not any(bucket.run == event.run for bucket in self.trace.buckets):
            when = (f"no all-reduce in this call: DDP all-reduces once per forward, and call "
                    f"{min(earlier)} did")
        elif not launched:
            when = "before DDP's all-reduce: no bucket had been handed over yet"
        else:
            numbers = ", ".join(str(index) for index in launched)
            when = (f"after bucket{'s' if len(launched) > 1 else ''} {numbers} "
                    "went to the all-reduce, before backward wrote the mean into .grad")
        what = ("gradient" if event.hook == "tensor" else ".grad")
        whose = Whose("local", f"rank {self.rank}'s own {what} of {event.target}", when)
        if event.hook == "post_accumulate_grad":
            held = self.held_mean(event, when)
            if held is not None:
                return held
        return ScopedArg(event.seq, event.args[0].name, whose, None)

    def held_mean(self, event: LabelledEvent, when: str) -> ScopedArg | None:
        """A post-accumulate hook in a later call of the same forward, on a .grad that still
        holds the mean an earlier call's all-reduce wrote (not zeroed since): what it sees is
        that mean plus this rank's own gradients of the calls since, checked as such. None
        where .grad is this rank's own alone (the rank walk's own label holds)."""
        reduced = [run for run in self.reduced_calls(event.target) if run < event.run]
        if not reduced or any(run.fresh for run in self.trace.runs
                              if run.kind == "backward" and max(reduced) < run.index
                              <= event.run):
            return None
        whose = Whose("mixed", f"the mean over {self.ranks} that call {max(reduced)}'s "
                      f"all-reduce wrote into .grad, plus rank {self.rank}'s own gradients of "
                      "the calls since", when)
        found = self.accumulated(event.target)
        value = event.args[0].value
        if found is None or event.run not in found.after:
            return ScopedArg(event.seq, event.args[0].name, whose, None,
                             "a backward call of the pass failed")
        expected = found.after[event.run][self.rank]
        return ScopedArg(event.seq, event.args[0].name, whose, *_checked(value, expected))

    def changed_by(self, name: str) -> str | None:
        """The user's hook that changed `name`'s gradient on this rank in this pass, if any."""
        return self.changers.get(name)

    @cached_property
    def changers(self) -> dict[str, str]:
        """Each tensor a user's hook changed the gradient of in this pass, with the first
        such hook (read once: every slot, grad and call asks)."""
        found: dict[str, str] = {}
        for event in self.walk_pass.events:
            if (event.user is not None and event.changed
                    and event.hook in ("tensor", "post_accumulate_grad")):
                found.setdefault(event.target, event.user)
        return found

    def silent(self, reduced: set[str]) -> tuple[Silent, ...]:
        """The parameters' tensor and post-accumulate hooks that never fired on this rank."""
        if not any(not run.failed and run.kind == "backward" for run in self.trace.runs):
            return ()
        fired = {(event.hook, event.target) for event in self.walk_pass.events}
        silent = []
        for name in self.parameters:
            for hook in ("tensor", "post_accumulate_grad"):
                if (hook, name) in fired:
                    continue
                why = self.fsdp_silence(hook) if self.setup.wrap == "fsdp" else (
                    f"rank {self.rank}'s forward did not use {name}: no gradient reached it")
                local, _ = self.reference.get(name, ((), None))
                if self.setup.wrap == "ddp" and name in reduced and any(
                        item is not None for item in local):
                    why += (f"; DDP (find_unused_parameters) all-reduced zeros in its slot, "
                            f"so its .grad here is the other ranks' sum / {self.setup.world_size}"
                            ", which none of its hooks on this rank saw")
                elif self.setup.wrap == "ddp" and name in reduced:
                    why += "; no rank used it, and DDP leaves its .grad None"
                silent.append(Silent(hook, name, why))
        return tuple(silent)

    def runs_with_grads(self, runs: tuple[RunStep, ...]) -> tuple[RunStep, ...]:
        """Each call's parameters' `.grad` after it, checked as DDP leaves it (the
        single-process rule, before + added, does not hold once DDP has averaged `.grad`);
        under FSDP2, as the pass's end where it had one call."""
        checks: dict[tuple[int, str], Check | None] = {}
        for name in self.parameters:
            if self.setup.wrap == "fsdp":
                grad = next((item for item in self.walk_pass.grads if item.name == name), None)
                for run in runs:
                    checks[(run.run, name)] = None if grad is None else self.fsdp_grad(
                        grad).check
                continue
            found = self.accumulated(name)
            for run in runs:
                if run.kind != "backward" or self.changed_by(name) is not None:
                    continue
                expected = None if found is None else found.after.get(run.run)
                after = next((leaf.after for leaf in run.leaves if leaf.name == name), None)
                checks[(run.run, name)] = (None if expected is None or says_too_little(after)
                                           else _check(after, expected[self.rank]))
        return tuple(dataclasses.replace(step, leaves=tuple(
            dataclasses.replace(leaf, check=checks[(step.run, leaf.name)])
            if (step.run, leaf.name) in checks else leaf for leaf in step.leaves))
            for step in runs)

    # --- FSDP2 ---------------------------------------------------------------------------

    def fsdp(self) -> RankPass:
        grads = tuple(self.fsdp_grad(grad) for grad in self.walk_pass.grads)
        scoped = tuple(self.fsdp_scoped(event) for event in self.walk_pass.events
                       if event.hook == "post_accumulate_grad"
                       and event.target in self.parameters and event.args)
        return RankPass(self.walk_pass.mode, scoped, (), grads, self.silent(set()))

    def fsdp_whose(self, name: str, upto: int | None = None) -> tuple[Whose, torch.Tensor | None]:
        """Whose `name`'s sharded .grad is after call `upto` (None: the pass's end): each
        backward call's reduce-scatter adds that call's mean into it, so after several calls
        (not zeroed between) it holds their sum."""
        _, mean = self.reference.get(name, ((), None))
        rows = None if mean is None else shard_rows(mean, self.setup.world_size, self.rank)
        part = "" if rows is None else f" (rows {rows[0]}:{rows[1]}, this rank's shard)"
        calls = self.summed_calls(upto)
        what = (f"the mean over {self.ranks} of each rank's own gradient{part}" if calls < 2
                else f"the sum, over the {calls} backward calls so far, of each call's mean "
                     f"over {self.ranks}{part}")
        when = ("after FSDP2's reduce-scatter" if calls < 2 else
                f"after the reduce-scatters of the {calls} backward calls so far: .grad holds "
                "the sum of their means")
        whose = Whose("mean", what, when, rows)
        expected = None if mean is None or rows is None else mean[rows[0]:rows[1]]
        return whose, expected if rows is not None else mean

    def fsdp_grad(self, grad: FinalGrad) -> DistributedGrad:
        if grad.name not in self.parameters:
            whose = Whose("local", f"rank {self.rank}'s own gradient",
                          "an input's gradient: FSDP2 shards parameters only")
            return DistributedGrad(grad.name, grad.value, whose, grad.check)
        if self.no_backward:
            return self.never_written(grad)
        whose, expected = self.fsdp_whose(grad.name)
        if not self.one_backward:
            return DistributedGrad(grad.name, grad.value, whose, None,
                                   "checked per hook: the pass ran more than one backward call")
        return DistributedGrad(grad.name, grad.value, whose, *_checked(grad.value, expected))

    def summed_calls(self, upto: int | None) -> int:
        """The backward calls whose gradients .grad holds after call `upto` (None: all)."""
        last = len(self.trace.runs) if upto is None else upto
        return len(self.trace.summed_runs(last))

    def fsdp_scoped(self, event: LabelledEvent) -> ScopedArg:
        whose, expected = self.fsdp_whose(event.target, event.run)
        value = event.args[0].value
        if not self.one_backward:
            return ScopedArg(event.seq, event.args[0].name, whose, None,
                             "the pass ran more than one backward call")
        return ScopedArg(event.seq, event.args[0].name, whose, *_checked(value, expected))

    def never_written(self, grad: FinalGrad) -> DistributedGrad:
        """A parameter's .grad in a pass of autograd.grad calls alone: they hand their
        gradients back and write no .grad, so no all-reduce or reduce-scatter ever ran."""
        whose = Whose("local", f"rank {self.rank}'s .grad, never written",
                      "the pass made no backward call: autograd.grad returns its gradients "
                      "and leaves .grad as it was")
        return DistributedGrad(grad.name, grad.value, whose, None,
                               "no backward call wrote .grad")

    def fsdp_silence(self, hook: str) -> str:
        if hook == "tensor":
            return ("FSDP2 replaced the parameter with a sharded DTensor, which is not in the "
                    "autograd graph: a hook registered on it with register_hook never fires, "
                    "and torch says nothing (FSDP2 runs post-accumulate-grad hooks itself)")
        return "FSDP2 ran no post-accumulate-grad hook for it on this rank"


def shard_rows(full: torch.Tensor, world_size: int, rank: int) -> tuple[int, int] | None:
    """The rows of a parameter that rank `rank`'s FSDP2 shard holds: dim 0 cut as torch.chunk
    cuts it (parts of ceil(rows / world_size); the last ranks' may be short or empty)."""
    if full.dim() == 0:
        return None
    rows = full.shape[0]
    size = math.ceil(rows / world_size)
    start = min(rows, rank * size)
    return start, min(rows, start + size)


def _checked(value: TensorValue | None,
             expected: torch.Tensor | None) -> tuple[Check | None, str | None]:
    """`_check`, or no check and why, where the value's summary says too little."""
    too_little = says_too_little(value)
    return (None, too_little) if too_little is not None else (_check(value, expected), None)


def _check(value: TensorValue | None, expected: torch.Tensor | None) -> Check:
    """`value` against `expected`; no gradient expected (no rank reached the leaf) is zeros
    of the value's shape where DDP put zeros, and no value at all where it left None."""
    if expected is None:
        if value is None:
            return Check(True, 0.0, None)
        expected = torch.zeros(tuple(value.shape))
    return check(value, expected)


def _with_grads(walk_pass: PassWalk, rank_pass: RankPass) -> PassWalk:
    """The rank walk's pass with each `.grad`'s check the distributed one, and no
    single-process check left on a hook argument the wrapping made another value (its
    distributed reading, `RankPass.scoped`, has the check: counted once)."""
    checks = {grad.name: grad.check for grad in rank_pass.grads}
    read = {(item.seq, item.arg): item for item in rank_pass.scoped
            if item.whose.scope == "mixed"}
    events = tuple(dataclasses.replace(event, args=tuple(
        dataclasses.replace(arg, check=None, not_checked=f"read as {read_as.whose.text}")
        if (read_as := read.get((event.seq, arg.name))) is not None else arg
        for arg in event.args)) if any(key[0] == event.seq for key in read) else event
        for event in walk_pass.events)
    return dataclasses.replace(walk_pass, events=events, grads=tuple(
        dataclasses.replace(grad, check=checks.get(grad.name, grad.check))
        for grad in walk_pass.grads))


__all__ = ["Reference", "Setup", "rank_walk", "shard_rows"]
