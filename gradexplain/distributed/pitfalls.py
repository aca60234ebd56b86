"""What a user would get wrong about hooks under the wrapping, each said only where this walk
shows it, with this walk's own numbers (the full pass of ranks 0 and 1).

One function per pitfall: it looks at the ranks' records and returns a Pitfall or None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gradexplain.distributed.label import Setup
from gradexplain.records.distributed import Pitfall, RankPass, RankWalk
from gradexplain.records.numbers import fmt_value
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import PassWalk

# Each finder reads the ranks' records and how the walk ran (its wrapping and DDP's options),
# never the wording of a record.
Finder = Callable[[Sequence[RankWalk], Setup], Pitfall | None]


def _value(value: TensorValue | None) -> str:
    return "None" if value is None else fmt_value(value)


def _final(rank_pass: RankPass, name: str) -> TensorValue | None:
    return next((grad.value for grad in rank_pass.grads if grad.name == name), None)


def _main_pass(rank: RankWalk) -> RankPass | None:
    return rank.pass_named("full") or (rank.passes[0] if rank.passes else None)


def _walk_pass(rank: RankWalk, rank_pass: RankPass) -> PassWalk:
    """The rank's own walk of the pass `rank_pass` reads (its events, by seq)."""
    return next(item for item in rank.walk.passes if item.mode == rank_pass.mode)


def post_accumulate_local(ranks: Sequence[RankWalk], setup: Setup) -> Pitfall | None:
    """DDP: a post-accumulate-grad hook sees this rank's own `.grad`, before the all-reduce."""
    return _local_hook(ranks, "post_accumulate_grad", "post_accumulate_local",
                       "register_post_accumulate_grad_hook sees this rank's own .grad",
                       "An optimizer step inside it (optimizer-in-backward, fused backward "
                       "passes) steps on unsynchronised gradients: each rank a different model.")


def tensor_hook_local(ranks: Sequence[RankWalk], setup: Setup) -> Pitfall | None:
    """DDP: `param.register_hook` sees this rank's own gradient, not the average."""
    return _local_hook(ranks, "tensor", "tensor_hook_local",
                       "param.register_hook sees this rank's own gradient, not the average",
                       "Clipping or logging it there acts on one rank's gradient; what the "
                       "optimizer uses is the mean, in .grad once backward has returned. A hook "
                       "that returns a new gradient changes what goes into the all-reduce, "
                       "so every rank's .grad gets it.")


def _local_hook(ranks: Sequence[RankWalk], hook: str, key: str, title: str,
                consequence: str) -> Pitfall | None:
    """The first parameter whose `hook` got this rank's own value while its .grad ended as the
    mean, told with every rank's value (one whose ranks' values differ says it best)."""
    rank_pass = _main_pass(ranks[0]) if len(ranks) > 1 else None
    if rank_pass is None:
        return None
    walk_pass = _walk_pass(ranks[0], rank_pass)
    events = {event.seq: event for event in walk_pass.events}
    found = []
    for scoped in rank_pass.scoped:
        event = events[scoped.seq]
        # Only a hook that got this rank's own value (FSDP2's post-accumulate hooks get the
        # averaged shard: the pitfall is not there).
        if event.hook != hook or scoped.whose.scope != "local" or not event.args:
            continue
        grad = next((item for item in rank_pass.grads if item.name == event.target), None)
        if grad is None or grad.whose.scope != "mean":
            continue
        mine = event.args[0].value
        theirs = _counterparts(ranks[1:], hook, event.target)
        same = all(value == mine for _, value in theirs)
        found.append((same, event.target, mine, theirs, grad))
    if not found:
        return None
    _, target, mine, theirs, grad = min(found, key=lambda item: item[0])
    others = ", ".join(f"rank {rank}'s {_value(value)}" for rank, value in theirs)
    return Pitfall(key, title,
                   f"On {target}, rank 0's hook got {_value(mine)}"
                   f"{', ' + others if others else ''}; after backward, .grad is the mean on "
                   f"every rank: {_value(grad.value)}. {consequence}")


def _counterparts(ranks: Sequence[RankWalk], hook: str,
                  target: str) -> list[tuple[int, TensorValue | None]]:
    """Each rank's first value of `hook` on `target` in its main pass, for the ranks that
    have one (their models are the same; their event numbers need not be), by rank."""
    values = []
    for rank in ranks:
        rank_pass = _main_pass(rank)
        if rank_pass is None:
            continue
        walk_pass = _walk_pass(rank, rank_pass)
        match = next((event for event in walk_pass.events
                      if event.hook == hook and event.target == target and event.args), None)
        if match is not None:
            values.append((rank.rank, match.args[0].value))
    return values


def no_sync_local(ranks: Sequence[RankWalk], setup: Setup) -> Pitfall | None:
    """DDP inside no_sync(): `.grad` stays each rank's own."""
    rank_pass = _main_pass(ranks[0]) if ranks else None
    if setup.wrap != "ddp" or not setup.ddp.no_sync or rank_pass is None or not rank_pass.grads:
        return None
    return Pitfall("no_sync_local", "inside no_sync(), .grad stays each rank's own",
                   "No bucket was all-reduced: every rank's .grad is its own gradient, and the "
                   "ranks' models drift apart if the optimizer steps now. Accumulate this "
                   "way, then run one backward outside no_sync(): that one all-reduces the "
                   "accumulated .grad.")


def unused_parameter(ranks: Sequence[RankWalk], setup: Setup) -> Pitfall | None:
    """DDP with find_unused_parameters: a rank that never used a parameter still gets its
    gradient (another rank used it), which none of its hooks saw."""
    if setup.wrap != "ddp":
        return None
    for rank in ranks:
        rank_pass = _main_pass(rank)
        if rank_pass is None:
            continue
        for silent in rank_pass.silent:
            value = _final(rank_pass, silent.target)
            if silent.hook == "tensor" and value is not None:
                return Pitfall(
                    "unused_parameter",
                    "a rank that never used a parameter gets a gradient for it",
                    f"Rank {rank.rank}'s forward did not use {silent.target}, so none of its "
                    f"hooks fired there; DDP put zeros in its bucket slot, and after backward "
                    f"its .grad on rank {rank.rank} is {_value(value)}: the other ranks' sum "
                    f"/ {setup.world_size}.")
    return None


def unused_stops_the_all_reduce(ranks: Sequence[RankWalk], setup: Setup) -> Pitfall | None:
    """DDP (outside no_sync): a parameter no rank's forward used got no gradient, so the bucket
    holding it never became ready and no bucket was all-reduced: every .grad stays local."""
    passes = [_main_pass(rank) for rank in ranks]
    main = passes[0] if passes else None
    if (setup.wrap != "ddp" or setup.ddp.no_sync or len(ranks) < 2 or main is None
            or main.buckets or any(item is None for item in passes)):
        return None
    parameters = _parameters(ranks[0], main)
    unused = [grad.name for grad in main.grads if grad.name in parameters
              and all(item is not None and _final(item, grad.name) is None for item in passes)]
    local = next((grad for grad in main.grads if grad.value is not None
                  and grad.name in parameters and grad.whose.scope == "local"), None)
    if not unused or local is None:
        return None
    theirs = ", ".join(f"rank {rank.rank}'s {_value(_final(item, local.name))}"
                       for rank, item in zip(ranks, passes, strict=True) if item is not None)
    return Pitfall(
        "unused_stops_the_all_reduce",
        "one unused parameter, and DDP averages nothing",
        f"No rank's forward used {', '.join(unused)}: "
        f"{'it' if len(unused) == 1 else 'they'} got no gradient, so the bucket holding "
        f"{'it' if len(unused) == 1 else 'them'} never became ready, and DDP all-reduced no "
        "bucket in this pass. Every "
        f".grad stays each rank's own: {local.name} is {theirs}. torch's default "
        "find_unused_parameters=False expects every parameter to get a gradient; "
        "find_unused_parameters=True (spec: distributed.ddp) lets DDP mark the unused ones "
        "ready and average the rest.")


def full_hooks_change_ddp(ranks: Sequence[RankWalk], setup: Setup) -> Pitfall | None:
    """DDP: the full pass's hooks made DDP average what the legacy pass's did not (or the
    other way round). Full backward hooks on a module wrap all its output tensors in one node,
    so a parameter only an output the loss ignores reads gets a gradient (zeros) in that pass,
    and DDP counts it ready; without them, as in plain DDP, it gets none."""
    if setup.wrap != "ddp" or not ranks:
        return None
    rank = ranks[0]
    legacy, full = rank.pass_named("legacy"), rank.pass_named("full")
    if legacy is None or full is None:
        return None
    scopes = {mode: {grad.name: grad.whose.scope for grad in item.grads
                     if grad.value is not None}
              for mode, item in (("legacy", legacy), ("full", full))}
    differ = sorted(name for name in scopes["full"]
                    if scopes["legacy"].get(name, scopes["full"][name]) != scopes["full"][name])
    if not differ and bool(legacy.buckets) == bool(full.buckets):
        return None
    example = differ[0] if differ else None
    whose = ("" if example is None else
             f" {example}.grad is {scopes['legacy'][example]} in the legacy pass and "
             f"{scopes['full'][example]} in the full pass.")
    return Pitfall(
        "full_hooks_change_ddp",
        "the full pass's hooks change what DDP averages",
        f"DDP {_reduced(legacy)} in the legacy pass and {_reduced(full)} in the full pass."
        f"{whose} "
        "Full backward hooks on a module wrap all its output tensors in one node: a parameter "
        "only an output the loss ignores reads then gets a gradient (zeros), and DDP counts it "
        "ready. The legacy pass, whose hooks change no graph, does what DDP does without "
        "hooks; read the full pass's .grad as what DDP does with full hooks registered.")


def _reduced(rank_pass: RankPass) -> str:
    """What DDP all-reduced in a pass, in words."""
    return (f"all-reduced {len(rank_pass.buckets)} bucket(s)" if rank_pass.buckets
            else "all-reduced no bucket")


def _parameters(rank: RankWalk, rank_pass: RankPass) -> set[str]:
    """The parameters of a rank's pass: those whose hooks were read (fired or silent)."""
    walk_pass = _walk_pass(rank, rank_pass)
    events = {event.seq: event.target for event in walk_pass.events}
    return ({item.target for item in rank_pass.silent}
            | {events[item.seq] for item in rank_pass.scoped if item.seq in events})


def fsdp_tensor_hook_silent(ranks: Sequence[RankWalk], setup: Setup) -> Pitfall | None:
    """FSDP2: `param.register_hook` never fires."""
    rank_pass = _main_pass(ranks[0]) if ranks else None
    if setup.wrap != "fsdp" or rank_pass is None:
        return None
    silent = [item.target for item in rank_pass.silent if item.hook == "tensor"]
    if not silent:
        return None
    return Pitfall("fsdp_tensor_hook_silent", "under FSDP2, param.register_hook never fires",
                   f"The walk put a tensor hook on every parameter ({', '.join(silent)}); "
                   "none fired, and torch said nothing. fully_shard replaces each parameter "
                   "with a sharded DTensor that is not in the autograd graph. Use "
                   "register_post_accumulate_grad_hook, which FSDP2 runs itself after the "
                   "reduce-scatter.")


def fsdp_post_accumulate_mean(ranks: Sequence[RankWalk], setup: Setup) -> Pitfall | None:
    """FSDP2: the post-accumulate hook sees this rank's shard of the mean (unlike DDP)."""
    rank_pass = _main_pass(ranks[0]) if ranks else None
    if rank_pass is None or not rank_pass.scoped:
        return None
    scoped = rank_pass.scoped[0]
    if scoped.whose.scope != "mean":
        return None
    walk_pass = _walk_pass(ranks[0], rank_pass)
    event = next(item for item in walk_pass.events if item.seq == scoped.seq)
    return Pitfall("fsdp_post_accumulate_mean",
                   "under FSDP2, post-accumulate-grad hooks see the averaged shard",
                   f"Rank 0's hook on {event.target} got {_value(event.args[0].value)}: "
                   f"{scoped.whose.text}. Under DDP the same hook sees this rank's own "
                   "gradient, before the all-reduce.")


def module_hooks_local(ranks: Sequence[RankWalk], setup: Setup) -> Pitfall | None:
    """Module backward hooks see activation gradients, which no wrapping synchronises."""
    if not ranks:
        return None
    full = next((item for item in ranks[0].walk.passes if item.mode == "full"), None)
    if full is None or not any(event.hook == "full_backward" for event in full.events):
        return None
    return Pitfall("module_hooks_local",
                   "module backward hooks see this rank's own activation gradients",
                   "grad_input and grad_output are gradients of activations, which neither "
                   "DDP nor FSDP synchronises: each rank's are its own (checked above against "
                   "that rank's single-process run). Only parameters' gradients are averaged.")


FINDERS: tuple[Finder, ...] = (full_hooks_change_ddp, tensor_hook_local,
                               post_accumulate_local, no_sync_local,
                               unused_parameter, unused_stops_the_all_reduce,
                               fsdp_tensor_hook_silent,
                               fsdp_post_accumulate_mean, module_hooks_local)


def pitfalls(ranks: Sequence[RankWalk], setup: Setup) -> tuple[Pitfall, ...]:
    """Every pitfall this walk shows, in a fixed order."""
    found = (finder(ranks, setup) for finder in FINDERS)
    return tuple(item for item in found if item is not None)


__all__ = ["FINDERS", "pitfalls"]
