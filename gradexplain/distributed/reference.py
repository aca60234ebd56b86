"""The single-process computation every distributed value is checked against: each rank's
inputs run in this process, hook-free and unwrapped, with the same seeds, and each leaf's
`.grad` after the spec's backward calls; then their mean over ranks.

Written from the spec alone, as a user would compute it by hand: build, forward, backward, read
`.grad`. Nothing here knows what DDP or FSDP does, so a wrong distributed label cannot pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gradexplain.capture.build import Builder, Built, build, make_tensor, observe
from gradexplain.capture.user_hooks import user_hooks
from gradexplain.capture.values import tensor_value
from gradexplain.language.model import ModelSpec
from gradexplain.records.distributed import ReferenceGrad


@dataclass(frozen=True)
class CallGrads:
    """One backward call of a rank's single-process run: whether `.grad` was zeroed before it,
    and what it added to each leaf's `.grad` (None: nothing reached the leaf)."""

    zeroed: bool
    added: dict[str, torch.Tensor | None]


@dataclass(frozen=True)
class LocalRun:
    """A rank's inputs run in this process: each leaf's `.grad` at the end (`final`) and what
    each backward call added (`calls`, in the order the pass numbers its calls)."""

    final: dict[str, torch.Tensor | None]
    calls: tuple[CallGrads, ...]


def local_grads(spec: ModelSpec, make: Builder | None = None) -> LocalRun:
    """Every leaf that requires grad, with its `.grad` after the spec's backward calls and what
    each call added, in one hook-free, unwrapped run of `spec`. A call torch refuses ends the
    run there, as it ends the pass."""
    built = make() if make is not None else build(spec)
    # A Python model's own backward hooks are off here, as in the single-process check run
    # (its forward hooks stay: they are part of what it computes): what is checked is the true
    # derivative, and where a hook of the user's changed a value on a rank, that value is
    # marked so and not checked. Under FSDP2 they never run at all (fully_shard replaces the
    # parameters they were registered on).
    with user_hooks(built.model, "replay", None):
        return _local_run(spec, built)


def _local_run(spec: ModelSpec, built: Built) -> LocalRun:
    named: dict[str, Any] = {}
    with observe(lambda name, value: named.setdefault(name, value)):
        returned = built.forward()
    leaves = {name: tensor for name, tensor in built.leaves().items() if tensor.requires_grad}
    calls = []
    try:
        for backward in spec.backwards:
            of = returned[backward.of] if backward.of in returned else named[backward.of]
            gradient = None if backward.gradient is None else make_tensor(backward.gradient)
            for time in range(backward.times):
                zeroed = backward.zero_grad if time == 0 else backward.zero_grad_between
                if zeroed:
                    for leaf in leaves.values():
                        leaf.grad = None
                before = _grads(leaves)
                torch.autograd.backward(of, gradient, retain_graph=backward.retain_graph)
                after = _grads(leaves)
                calls.append(CallGrads(zeroed, {
                    name: _added(before[name], after[name]) for name in leaves}))
    except RuntimeError:
        pass
    return LocalRun(_grads(leaves), tuple(calls))


def _grads(leaves: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
    return {name: None if leaf.grad is None else leaf.grad.detach().clone()
            for name, leaf in leaves.items()}


def _added(before: torch.Tensor | None, after: torch.Tensor | None) -> torch.Tensor | None:
    if after is None:
        return None
    return after if before is None else after - before


def reference_grads(per_rank: Sequence[LocalRun]) -> dict[
        str, tuple[tuple[torch.Tensor | None, ...], torch.Tensor | None]]:
    """Each leaf's local gradient on every rank and their mean over ranks. A rank whose
    forward never reached a leaf adds zero to the mean (DDP's find_unused_parameters puts zeros
    in its slot); a leaf no rank reached has no mean."""
    names = list(dict.fromkeys(name for run in per_rank for name in run.final))
    result = {}
    for name in names:
        local = tuple(run.final.get(name) for run in per_rank)
        result[name] = (local, mean_over_ranks(local))
    return result


def summed(grads: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """The sum over ranks, in float64 (a rank with no gradient adds zeros, as DDP's bucket
    slot does); None where no rank has one."""
    present = [item.double() for item in grads if item is not None]
    return None if not present else torch.stack(present).sum(0)


def mean_over_ranks(grads: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """The sum over ranks divided by the number of ranks, every rank counted."""
    total = summed(grads)
    return None if total is None else total / len(grads)


def reference_records(reference: dict[str, tuple[tuple[torch.Tensor | None, ...],
                                                 torch.Tensor | None]]) -> tuple[
                                                     ReferenceGrad, ...]:
    """The reference as plain records, for the renderers."""
    return tuple(ReferenceGrad(name, tuple(tensor_value(item) for item in local),
                               tensor_value(mean))
                 for name, (local, mean) in reference.items())


__all__ = ["CallGrads", "LocalRun", "local_grads", "mean_over_ranks", "reference_grads",
           "reference_records", "summed"]
