"""One process against the wrapping: each rank's single-process walk beside the same rank's
distributed walk, pass by pass, hook call by hook call, with what the wrapping changed and why,
and a verdict per rank. No torch here.

Calls are paired structurally (analysis/distributed_pairs.py): the n-th call of a hook kind on a
target in one process is the n-th such call under the wrapping, wherever it fires.

What changed is decided from the distributed walk's records, never from the numbers alone:
whose derivative a wrapped value is (`ScopedArg`, `DistributedGrad`: this rank's own, or the
mean over ranks), which hooks fell silent and why (`Silent`), and the labels of both walks.
The numbers are compared too, to say where a changed quantity happens to hold the same values,
and to report a difference no record explains rather than hide it.
What it finds is records (records/distributed_diff.py), for render/ to show.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gradexplain.analysis.distributed_pairs import (
    NODE_HOOKS,
    node_name,
    occurrences,
    pairs,
    same_values,
)
from gradexplain.records.distributed import (
    DistributedGrad,
    DistributedWalk,
    RankPass,
    RankWalk,
    Silent,
)
from gradexplain.records.distributed_diff import (
    ArgChange,
    BucketChange,
    CallChange,
    ChangeKind,
    DistributedDiff,
    GradChange,
    PassChange,
    RankChange,
    node_title,
)
from gradexplain.records.paths import module_title
from gradexplain.records.trace import HookKind
from gradexplain.records.walk import FinalGrad, LabelledArg, LabelledEvent, PassWalk, Walk

# What the sentences call each wrapping.
WRAPPER_NAMES = {"ddp": "DDP", "fsdp": "FSDP2"}
# A verdict names this many hook calls of a kind, then counts the rest.
NAMED = 4



def distributed_diff(singles: Sequence[Walk], walk: DistributedWalk) -> DistributedDiff:
    """Every rank's single-process walk (`singles`, rank by rank) beside its distributed one."""
    if len(singles) != len(walk.ranks):
        raise ValueError(f"{len(singles)} single-process walks for {len(walk.ranks)} ranks")
    wrapper = WRAPPER_NAMES[walk.wrap]
    ranks = tuple(_Rank(single, rank, wrapper).change()
                  for single, rank in zip(singles, walk.ranks, strict=True))
    return DistributedDiff(walk.spec, walk.name, walk.torch, walk.world_size, walk.wrap,
                           wrapper, ranks)


class _Rank:
    """One rank: its single-process walk and its distributed one, pass by pass."""

    def __init__(self, single: Walk, rank: RankWalk, wrapper: str) -> None:
        self.single = single
        self.rank = rank
        self.wrapper = wrapper

    def change(self) -> RankChange:
        passes = []
        for wrapped_pass in self.rank.walk.passes:
            single_pass = next((item for item in self.single.passes
                                if item.mode == wrapped_pass.mode), None)
            rank_pass = self.rank.pass_named(wrapped_pass.mode)
            if single_pass is None or rank_pass is None:
                continue
            passes.append(_Pass(single_pass, wrapped_pass, rank_pass, self.wrapper).change())
        return RankChange(self.rank.rank, self.rank.inputs, tuple(passes),
                          _verdict(passes, self.wrapper))


class _Pass:
    """One pass of one rank in both runs."""

    def __init__(self, single: PassWalk, wrapped: PassWalk, rank_pass: RankPass,
                 wrapper: str) -> None:
        self.single = single
        self.wrapped = wrapped
        self.rank_pass = rank_pass
        self.wrapper = wrapper
        self.scoped = {(item.seq, item.arg): item for item in rank_pass.scoped}
        self.silent = {(item.hook, item.target): item for item in rank_pass.silent}
        self.user_hooks = {(item.hook, item.function): item for item in wrapped.user_hooks}

    def change(self) -> PassChange:
        return PassChange(self.wrapped.mode, len(self.single.events), len(self.wrapped.events),
                          tuple(self.calls()), tuple(self.buckets()), tuple(self.grads()))

    # --- hook calls ------------------------------------------------------------------------

    def calls(self) -> list[CallChange]:
        """Every call in the wrapped run's firing order; one that fired in one process only
        comes right after the call it followed there."""
        singles, wrapped = self.single.events, self.wrapped.events
        matched = pairs(singles, wrapped)
        placed: list[tuple[tuple[int, int, int], CallChange]] = []
        position_of: dict[int, int] = {}
        for position, (event, occurrence) in enumerate(zip(wrapped, occurrences(wrapped),
                                                           strict=True)):
            single = matched.get(position)
            if single is not None:
                position_of[single] = position
            placed.append(((position, 0, 0), self.pair(
                occurrence, None if single is None else singles[single], event)))
        after = -1
        for index, (event, occurrence) in enumerate(zip(singles, occurrences(singles),
                                                        strict=True)):
            if index in position_of:
                after = position_of[index]
                continue
            placed.append(((after, 1, index), self.pair(occurrence, event, None)))
        return [change for _, change in sorted(placed, key=lambda item: item[0])]

    def pair(self, occurrence: int, single: LabelledEvent | None,
             wrapped: LabelledEvent | None) -> CallChange:
        event = wrapped or single
        assert event is not None
        hook, target, user = event.hook, event.target, event.user
        args = tuple(self.args(single, wrapped))
        kind: ChangeKind
        if wrapped is None:
            kind, reason = "silenced", self.silenced(hook, target)
        elif single is None:
            kind, reason = "added", self.added(wrapped)
        else:
            kind, reason = _paired_kind(args, self.wrapper)
        return CallChange(hook, target, user, occurrence, event.run,
                          single.seq if single else None, wrapped.seq if wrapped else None,
                          kind, args, reason, event.node if hook in NODE_HOOKS else None)

    def args(self, single: LabelledEvent | None,
             wrapped: LabelledEvent | None) -> Iterator[ArgChange]:
        left = {arg.name: arg for arg in single.args} if single else {}
        right = {arg.name: arg for arg in wrapped.args} if wrapped else {}
        for name in dict.fromkeys([*left, *right]):
            one, other = left.get(name), right.get(name)
            scoped = self.scoped.get((wrapped.seq, name)) if wrapped else None
            yield ArgChange(
                name, one, other,
                one is not None and other is not None and same_values(one.value, other.value),
                one is not None and other is not None and _same_label(one, other),
                scoped.whose if scoped else None, scoped.check if scoped else None,
                scoped.not_checked if scoped else None)

    def silenced(self, hook: HookKind, target: str) -> str:
        silent = self.silent.get((hook, target))
        if silent is not None:
            return silent.why
        return f"it fired in one process and not under {self.wrapper}"

    def added(self, event: LabelledEvent) -> str:
        if event.hook in NODE_HOOKS:
            return (f"{node_name(event.node)} is a node only the wrapped run's graph has: "
                    f"{self.wrapper} put it there")
        user = self.user_hooks.get((event.hook, event.user or ""))
        if user is not None:
            return (f"{user.function}: a {user.hook} hook {self.wrapper} registered on "
                    f"{module_title(user.target)}, which the walk records as one the model "
                    "came with")
        return f"only under {self.wrapper}"

    # --- what only the wrapping makes, and .grad ----------------------------------------------

    def buckets(self) -> Iterator[BucketChange]:
        events = {event.seq: event for event in self.wrapped.events}
        for bucket in self.rank_pass.buckets:
            names = ", ".join(slot.parameter for slot in bucket.slots)
            event = events.get(bucket.after_seq) if bucket.after_seq is not None else None
            where = (f"after #{event.seq} ({event.hook} {module_title(event.target)})"
                     if event is not None else "before every hook call")
            reduced = any(slot.after is not None for slot in bucket.slots)
            text = (f"only under {self.wrapper}: its communication hook got bucket "
                    f"{bucket.index} ({names}) in run {bucket.run}, {where}, holding this "
                    "rank's own gradients; "
                    + ("the all-reduce returned their sum over ranks" if reduced
                       else "the all-reduce never completed"))
            changed = [f"{slot.parameter} by your hook {slot.changed_by}"
                       for slot in bucket.slots if slot.changed_by is not None]
            if changed:
                text += "; what this rank put in was changed first: " + ", ".join(changed)
            yield BucketChange(bucket, text)

    def grads(self) -> Iterator[GradChange]:
        single = {grad.name: grad for grad in self.single.grads}
        wrapped = {grad.name: grad for grad in self.rank_pass.grads}
        silent: dict[str, list[Silent]] = {}
        for item in self.rank_pass.silent:
            silent.setdefault(item.target, []).append(item)
        for name in dict.fromkeys([*single, *wrapped]):
            yield _grad(name, single.get(name), wrapped.get(name), silent.get(name, []),
                        self.wrapper)


def _same_label(left: LabelledArg, right: LabelledArg) -> bool:
    one, other = left.meaning, right.meaning
    if one is None or other is None:
        return one is None and other is None
    return ((one.kind, one.of, one.wrt, one.layout, one.partial, one.modified)
            == (other.kind, other.of, other.wrt, other.layout, other.partial, other.modified))


def _label(arg: LabelledArg | None) -> str:
    if arg is None:
        return "no such argument"
    if arg.value is None:
        return "None"
    return arg.meaning.text if arg.meaning is not None else "not a derivative"


def _paired_kind(args: Sequence[ArgChange], wrapper: str) -> tuple[ChangeKind, str]:
    """What the wrapping did to a call that fired in both runs, and why in one line."""
    scoped = [arg for arg in args if arg.whose is not None and arg.whose.scope != "local"]
    if scoped:
        reasons = []
        for arg in scoped:
            assert arg.whose is not None
            text = f"{arg.name} is {arg.whose.text}, {arg.whose.when}"
            if arg.same_value:
                text += " (the same numbers here, though not the same quantity)"
            reasons.append(text)
        return "changed", "; ".join(reasons)
    differing = [arg for arg in args if not arg.same_value]
    if differing:
        return "changed", "; ".join(
            f"{arg.name} differs ({_label(arg.single)} in one process, {_label(arg.wrapped)} "
            f"under {wrapper}), and no record of the distributed walk says why"
            for arg in differing)
    relabelled = [arg.name for arg in args if not arg.same_label]
    if relabelled:
        text = (f"{', '.join(relabelled)}: the same value, whose label names another tensor "
                f"under {wrapper}")
        if wrapper == "FSDP2":
            text += (": FSDP2's forward runs on the parameters it all-gathers, leaves of "
                     "their own, not the model's sharded ones")
        return "relabelled", text
    return "same", ""


def _grad(name: str, single: FinalGrad | None, wrapped: DistributedGrad | None,
          silent: Sequence[Silent], wrapper: str) -> GradChange:
    """A leaf's `.grad` after the pass in one process and under the wrapping."""
    equal = (single is not None and wrapped is not None
             and same_values(single.value, wrapped.value))
    if wrapped is None:
        return GradChange(name, single, None, True, False,
                          f"the distributed walk has no .grad of {name}")
    if single is None:
        return GradChange(name, None, wrapped, True, False,
                          f"only under {wrapper}: {wrapped.whose.text}, {wrapped.whose.when}")
    whose = wrapped.whose
    changed = whose.scope != "local"
    if changed:
        reason = whose.when  # whose.text is the wrapped side's own label
        if equal:
            reason += " (the same numbers here, though not the same quantity)"
    elif equal:
        reason = ""
    else:
        changed = True
        reason = (f"the values differ though the distributed walk reads it as {whose.text} "
                  f"({whose.when})")
    if changed and {item.hook for item in silent} >= {"tensor", "post_accumulate_grad"}:
        # No hook of the leaf fired on this rank: why says where its .grad came from.
        reason = "; ".join(part for part in (reason, silent[0].why) if part)
    return GradChange(name, single, wrapped, changed, equal, reason)


def _verdict(passes: Sequence[PassChange], wrapper: str) -> str:
    """One line per rank: what the wrapping changed, over both passes, each kind of change
    with the hooks it touched (`post_accumulate_grad on fc1.weight, fc2.weight`)."""
    kinds: dict[str, dict[str, list[str]]] = {}
    for change in passes:
        for call in change.differing():
            hook = f"{call.user} ({call.hook})" if call.user else call.hook
            targets = kinds.setdefault(call.kind, {}).setdefault(hook, [])
            place = node_title(call.node) if call.node else module_title(call.target)
            if place not in targets:
                targets.append(place)
    grads = list(dict.fromkeys(grad.name for change in passes for grad in change.grads
                               if grad.changed))
    buckets = max((len(change.buckets) for change in passes), default=0)
    added = (f"; {wrapper} added its communication hook ({buckets} bucket call"
             f"{'s' if buckets != 1 else ''} a pass)" if buckets else "")
    if not kinds:
        if grads:
            return f"wrapping changed only .grad after backward ({_named(grads)}){added}"
        return f"wrapping changed nothing any hook or .grad saw{added}"
    words = {"changed": "what {} saw", "silenced": "silenced {}",
             "relabelled": "relabelled {} (the same values)", "added": "added {}"}
    parts = [words[kind].format(", ".join(f"{hook} on {_named(targets)}"
                                          for hook, targets in kinds[kind].items()))
             for kind in words if kind in kinds]
    if grads:
        parts.append(f".grad after backward ({_named(grads)})")
    return "wrapping changed " + "; ".join(parts) + added


def _named(items: Sequence[str]) -> str:
    shown = ", ".join(items[:NAMED])
    more = len(items) - NAMED
    return shown + (f" and {more} more" if more > 0 else "")


__all__ = ["WRAPPER_NAMES", "distributed_diff"]
