"""What `analysis.distributed_diff` finds when it sets each rank's single-process walk beside
the same rank's distributed one: per rank and pass, every hook call paired with its
counterpart (`CallChange`, argument by argument: `ArgChange`), the calls only the wrapping
made (DDP's communication hook, bucket by bucket: `BucketChange`), each leaf's `.grad` after
backward (`GradChange`), and a verdict. Frozen and torch-free like every record; `render/`
shows them, `analysis/distributed_diff.py` makes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gradexplain.language.model import WrapKind
from gradexplain.records.check import Check
from gradexplain.records.distributed import CheckedBucket, DistributedGrad, Whose
from gradexplain.records.paths import module_title
from gradexplain.records.trace import HookKind, Mode, TensorValue
from gradexplain.records.walk import FinalGrad, LabelledArg

# What the wrapping did to one hook call, decided from the records (whose derivative each
# value is, which hooks fell silent and why), never from the numbers alone.
ChangeKind = Literal[
    "same",      # the same value with the same label
    "relabelled",  # the same value, its label names another tensor
    "changed",   # a value that is another quantity (another rank's, the mean, a shard)
    "silenced",  # fired in one process, not under the wrapping
    "added",     # only the wrapped run made this call (a hook the wrapping registered)
]


@dataclass(frozen=True)
class ArgChange:
    """One argument of a call on both sides (None: that side has no such argument, or the
    call did not fire there). `whose` says whose derivative the wrapped value is where the
    distributed walk read it as one (records.distributed.ScopedArg), with its check."""

    name: str
    single: LabelledArg | None
    wrapped: LabelledArg | None
    same_value: bool
    same_label: bool
    whose: Whose | None = None
    whose_check: Check | None = None
    not_checked: str | None = None


@dataclass(frozen=True)
class CallChange:
    """One hook call, matched by hook kind, target and occurrence: the `occurrence`-th call of
    `hook` on `target` (by the user's function `user`, None: gradexplain's own) in the pass.
    A node hook is matched by its node's name (`node`) instead: the wrapping may put nodes of
    its own into the graph, which renumbers the walk's node targets (`n16`), and `target` is
    the wrapped run's (one process's, for a call only it made). `reason` is one line from the
    records ("" where nothing changed)."""

    hook: HookKind
    target: str
    user: str | None
    occurrence: int
    run: int
    single_seq: int | None
    wrapped_seq: int | None
    kind: ChangeKind
    args: tuple[ArgChange, ...]
    reason: str
    node: str | None = None  # a node hook's node, as the graph names it (AddmmBackward0)

    @property
    def place(self) -> str:
        """Where the hook sits, as the reader knows it: a node hook's node by its name (with
        the walk's number for it), else the target (a module, `<model>`, or a tensor)."""
        if self.node is not None:
            return f"{node_title(self.node)} ({self.target})"
        return module_title(self.target)


@dataclass(frozen=True)
class BucketChange:
    """A call of DDP's communication hook, which only the wrapped run makes: the bucket as the
    distributed walk checked it, and what it means for the hooks around it."""

    bucket: CheckedBucket
    reason: str


@dataclass(frozen=True)
class GradChange:
    """A leaf's `.grad` after the pass: this rank's own in one process, whatever the wrapping
    left there (with whose derivative it is) under it. `changed` is read from `wrapped.whose`
    (the mean, a shard of it), not from the numbers: `equal` says whether they happen to agree
    all the same."""

    name: str
    single: FinalGrad | None
    wrapped: DistributedGrad | None
    changed: bool
    equal: bool
    reason: str


@dataclass(frozen=True)
class PassChange:
    """One pass (legacy or full) of one rank: its hook calls in the wrapped run's firing order
    (a call that fired in one process only after the call it followed there), the buckets,
    the `.grad`s."""

    mode: Mode
    single_calls: int
    wrapped_calls: int
    calls: tuple[CallChange, ...]
    buckets: tuple[BucketChange, ...]
    grads: tuple[GradChange, ...]

    def unchanged(self) -> list[CallChange]:
        return [call for call in self.calls if call.kind == "same"]

    def differing(self) -> list[CallChange]:
        return [call for call in self.calls if call.kind != "same"]


@dataclass(frozen=True)
class RankChange:
    """One rank: its inputs, each pass set beside its single-process walk, and the verdict."""

    rank: int
    inputs: tuple[tuple[str, TensorValue | None], ...]
    passes: tuple[PassChange, ...]
    verdict: str


@dataclass(frozen=True)
class DistributedDiff:
    """Every rank's single-process walk beside its walk under `wrap` (`world_size` ranks)."""

    spec: str
    name: str
    torch: str
    world_size: int
    wrap: WrapKind
    wrapper: str  # the wrapping's name, as sentences say it
    ranks: tuple[RankChange, ...]


def node_title(node: str) -> str:
    """An autograd node's name without torch's namespace: `AccumulateGrad`."""
    return node.removeprefix("torch::autograd::")


__all__ = ["ArgChange", "BucketChange", "CallChange", "ChangeKind", "DistributedDiff",
           "GradChange", "PassChange", "RankChange", "node_title"]
