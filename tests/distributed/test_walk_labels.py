"""`walk --ranks 2`'s labels against plain torch: every value the wrapping touches, on every
rank, compared with single-process computations written here (each rank's own gradient, and
their mean), under DDP (default, no_sync, find_unused_parameters) and FSDP2, for the facts
file's model and for models of our own (an MLP whose batch is split across ranks, a model that
uses a parameter on one rank only). And a wrong claim cannot pass.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn

from gradexplain.capture.pymodel import python_source
from gradexplain.distributed import label
from gradexplain.distributed.label import Setup
from gradexplain.distributed.plan import split_batch
from gradexplain.distributed.run import Plan, capture_distributed
from gradexplain.language.model import DDPOptions, WrapKind
from gradexplain.records.check import Check
from gradexplain.records.distributed import DistributedWalk, RankPass, RankWalk
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import PassWalk
from tests.helpers.distributed import (
    FACTS_INPUTS,
    FACTS_MODEL,
    distributed_walk,
    facts_model,
    facts_walk,
)
from tests.helpers.distributed import FACTS_SPEC as FACTS_SPEC
from tests.helpers.distributed import NAMES as NAMES
from tests.helpers.distributed import facts_local as facts_local

DEFAULTS = DDPOptions()


def verified(check: Check | None) -> bool:
    return check is not None and check.verified


def tensor(value: TensorValue | None) -> torch.Tensor:
    assert value is not None and value.value is not None
    return torch.tensor(value.value, dtype=torch.float64).reshape(value.shape)


def close(value: TensorValue | None, expected: torch.Tensor) -> bool:
    got = tensor(value)
    return got.shape == expected.shape and torch.allclose(got, expected.double(), atol=1e-6,
                                                          rtol=1e-5)


@pytest.fixture(scope="module")
def ddp() -> DistributedWalk:
    return facts_walk("ddp")


@pytest.fixture(scope="module")
def fsdp() -> DistributedWalk:
    return facts_walk("fsdp")


@pytest.fixture(scope="module")
def no_sync() -> DistributedWalk:
    return facts_walk("ddp", DDPOptions(no_sync=True))


def walk_pass(rank: RankWalk, mode: str) -> PassWalk:
    return next(item for item in rank.walk.passes if item.mode == mode)


def rank_pass(rank: RankWalk, mode: str) -> RankPass:
    found = rank.pass_named(mode)
    assert found is not None
    return found


def hook_values(rank: RankWalk, mode: str, hook: str, target: str) -> list[TensorValue | None]:
    return [event.args[0].value for event in walk_pass(rank, mode).events
            if event.hook == hook and event.target == target]


MODES = ("legacy", "full")


@pytest.mark.parametrize("mode", MODES)
def test_ddp_parameter_hooks_see_each_ranks_own_gradient(ddp: DistributedWalk,
                                                         mode: str) -> None:
    for rank in ddp.ranks:
        local = facts_local(rank.rank)
        for name, expected in local.items():
            for hook in ("tensor", "post_accumulate_grad"):
                values = hook_values(rank, mode, hook, name)
                assert len(values) == 1, (rank.rank, name, hook)
                assert close(values[0], expected), (rank.rank, name, hook)
        scoped = rank_pass(rank, mode).scoped
        assert scoped and all(item.whose.scope == "local" for item in scoped)
        assert all("before" in item.whose.when for item in scoped)


def test_ddp_facts_numbers(ddp: DistributedWalk) -> None:
    """The issue's own numbers, as plain torch gives them."""
    first, second = (hook_values(rank, "full", "tensor", "fc2.weight")[0] for rank in ddp.ranks)
    assert close(first, torch.tensor([[0.469945, -0.446244, 0.623065]]))
    assert close(second, torch.tensor([[0.01, -0.446244, 0.680476]]))
    for rank in ddp.ranks:
        grad = next(item for item in rank_pass(rank, "full").grads if item.name == "fc2.weight")
        assert close(grad.value, torch.tensor([[0.239972, -0.446244, 0.651771]]))


@pytest.mark.parametrize("mode", MODES)
def test_ddp_grad_after_backward_is_the_mean(ddp: DistributedWalk, mode: str) -> None:
    mean = {name: (facts_local(0)[name] + facts_local(1)[name]) / 2 for name in NAMES}
    for rank in ddp.ranks:
        grads = {item.name: item for item in rank_pass(rank, mode).grads}
        for name, expected in mean.items():
            assert close(grads[name].value, expected)
            assert grads[name].whose.scope == "mean"
            assert verified(grads[name].check)
        # The rank walk's own final .grad check is the distributed one.
        final = {item.name: item for item in walk_pass(rank, mode).grads}
        assert all(final[name].check == grads[name].check for name in NAMES)
    assert not ddp.failures()


@pytest.mark.parametrize("mode", MODES)
def test_ddp_bucket_before_is_local_after_is_the_sum(ddp: DistributedWalk, mode: str) -> None:
    total = {name: facts_local(0)[name] + facts_local(1)[name] for name in NAMES}
    for rank in ddp.ranks:
        local = facts_local(rank.rank)
        buckets = rank_pass(rank, mode).buckets
        assert len(buckets) == 1  # the default bucket size holds this model whole
        slots = {slot.parameter: slot for slot in buckets[0].slots}
        assert set(slots) == set(NAMES)
        for name in NAMES:
            assert close(slots[name].before, local[name])
            assert close(slots[name].after, total[name])
            assert verified(slots[name].before_check)
            assert verified(slots[name].after_check)
        # The bucket is handed over after the last parameter hook of the pass.
        last_parameter_hook = max(event.seq for event in walk_pass(rank, mode).events
                                  if event.hook in ("tensor", "post_accumulate_grad"))
        after = buckets[0].after_seq
        assert after is not None and after >= last_parameter_hook


def test_ddp_module_hooks_are_checked_against_the_ranks_own_run(ddp: DistributedWalk) -> None:
    """grad_output of fc1's full hook is the rank's own gradient of h (= fc1.bias's)."""
    for rank in ddp.ranks:
        events = [event for event in walk_pass(rank, "full").events
                  if event.hook == "full_backward" and event.target == "fc1"]
        assert len(events) == 1
        grad_output = next(arg for arg in events[0].args if arg.name == "grad_output[0]")
        assert close(grad_output.value, facts_local(rank.rank)["fc1.bias"].unsqueeze(0))
        assert grad_output.check is not None and grad_output.check.verified


def test_no_sync_leaves_each_ranks_own_grad(no_sync: DistributedWalk) -> None:
    for rank in no_sync.ranks:
        local = facts_local(rank.rank)
        full = rank_pass(rank, "full")
        assert full.buckets == ()
        grads = {item.name: item for item in full.grads}
        for name in NAMES:
            assert close(grads[name].value, local[name])
            assert grads[name].whose.scope == "local"
            assert "no_sync" in grads[name].whose.when
    assert not no_sync.failures()
    assert any(item.key == "no_sync_local" for item in no_sync.pitfalls)


def fsdp_rows(rows: int, rank: int) -> slice:
    """torch.chunk's parts of dim 0, written out: ceil(rows / 2) each."""
    size = -(-rows // 2)
    return slice(min(rows, rank * size), min(rows, rank * size + size))


@pytest.mark.parametrize("mode", MODES)
def test_fsdp_post_accumulate_sees_the_averaged_shard(fsdp: DistributedWalk, mode: str) -> None:
    mean = {name: (facts_local(0)[name] + facts_local(1)[name]) / 2 for name in NAMES}
    for rank in fsdp.ranks:
        scoped = {item.seq: item for item in rank_pass(rank, mode).scoped}
        for name, expected in mean.items():
            shard = expected[fsdp_rows(expected.shape[0], rank.rank)]
            events = [event for event in walk_pass(rank, mode).events
                      if event.hook == "post_accumulate_grad" and event.target == name]
            assert len(events) == 1  # FSDP2 runs it itself, even for an empty shard
            assert close(events[0].args[0].value, shard)
            reading = scoped[events[0].seq]
            assert reading.whose.scope == "mean"
            assert reading.check is not None and reading.check.verified
            grad = next(item for item in rank_pass(rank, mode).grads if item.name == name)
            assert close(grad.value, shard)


def test_fsdp_tensor_hooks_never_fire_and_the_walk_says_so(fsdp: DistributedWalk) -> None:
    for rank in fsdp.ranks:
        assert not [event for event in walk_pass(rank, "full").events
                    if event.hook == "tensor" and event.target in NAMES]
        silent = {item.target for item in rank_pass(rank, "full").silent
                  if item.hook == "tensor"}
        assert silent == set(NAMES)
    assert any(item.key == "fsdp_tensor_hook_silent" for item in fsdp.pitfalls)
    assert not fsdp.failures()


def test_fsdp_gathered_parameters_are_named_after_their_parameter(fsdp: DistributedWalk) -> None:
    """FSDP2 runs the forward on the parameters it all-gathers: fc2's legacy hook, on its
    addmm, gets the gradient of the gathered weight, transposed, named after the parameter, and
    equal to plain torch's own gradient of fc2.weight on that rank."""
    for rank in fsdp.ranks:
        events = [event for event in walk_pass(rank, "legacy").events
                  if event.hook == "backward" and event.target == "fc2"]
        assert len(events) == 1
        arg = next(item for item in events[0].args if item.name == "grad_input[2]")
        assert arg.meaning is not None
        assert arg.meaning.wrt == "fc2.weight:gathered"
        assert arg.meaning.layout == "transposed"
        assert verified(arg.check)
        assert close(arg.value, facts_local(rank.rank)["fc2.weight"].T)


def test_ddp_all_reduces_once_per_forward_and_later_calls_accumulate() -> None:
    """Two backward calls on one forward (retain_graph) under DDP: call 1's bucket holds each
    rank's own gradient and DDP writes the mean into .grad; call 2 is not all-reduced, so its
    post-accumulate hook, and .grad at the end, hold that mean plus the rank's own gradient.
    Plain torch's numbers: g_r of one call alone, mean(g_0, g_1) + g_r."""
    text = FACTS_MODEL.replace("backward: loss", "backward: {of: loss, retain_graph: true, "
                               "times: 2}")
    walk = distributed_walk(text, FACTS_INPUTS, "ddp")
    local = [facts_local(rank) for rank in range(2)]
    for rank in walk.ranks:
        mine = local[rank.rank]
        buckets = rank_pass(rank, "full").buckets
        assert [bucket.run for bucket in buckets] == [1]
        slots = {slot.parameter: slot for slot in buckets[0].slots}
        posted = [event for event in walk_pass(rank, "full").events
                  if event.hook == "post_accumulate_grad" and event.run == 2]
        scoped = {item.seq: item for item in rank_pass(rank, "full").scoped}
        grads = {item.name: item for item in rank_pass(rank, "full").grads}
        for name in NAMES:
            held = (local[0][name] + local[1][name]) / 2 + mine[name]
            assert close(slots[name].before, mine[name]) and verified(slots[name].before_check)
            event = next(item for item in posted if item.target == name)
            assert close(event.args[0].value, held)
            assert scoped[event.seq].whose.scope == "mixed"
            assert verified(scoped[event.seq].check)
            assert close(grads[name].value, held) and verified(grads[name].check)
            assert grads[name].whose.scope == "mixed"
    assert not walk.failures()


# --- models of our own: a batch split across ranks, a parameter used on one rank only -------

class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.hidden = nn.Linear(3, 5)
        self.out = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.out(torch.relu(self.hidden(x)))
        return result


class OneRankOnly(nn.Module):
    """Uses `extra` only where its input's first entry is positive (rank 1's, here), and
    `never` nowhere."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.main = nn.Linear(2, 1)
        self.extra = nn.Linear(2, 1)
        self.never = nn.Linear(2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.main(x)
        if bool(x[0, 0] > 0):
            out = out + self.extra(x)
        return out


def python_walk(model: nn.Module, batch: torch.Tensor, wrap: WrapKind,
                options: DDPOptions = DEFAULTS) -> DistributedWalk:
    sources = [python_source(model, inputs, "test:model")
               for inputs in split_batch((batch,), 2)]
    plan = Plan(tuple(item.spec for item in sources), "test:model", sources[0].description,
                Setup(2, wrap, options), tuple(item.build for item in sources), 1000, 1)
    return capture_distributed(plan)


def plain_local(model: nn.Module, batch: torch.Tensor, rank: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s half of the batch through a copy of the model, `loss = out.sum()`."""
    import copy

    mine = copy.deepcopy(model)
    part = batch.chunk(2)[rank].clone().requires_grad_(True)
    mine(part).sum().backward()
    return {name: parameter.grad.clone() for name, parameter in mine.named_parameters()
            if parameter.grad is not None}


@pytest.fixture(scope="module")
def mlp_batch() -> torch.Tensor:
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(11))


@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_mlp_with_a_split_batch(mlp_batch: torch.Tensor, wrap: WrapKind) -> None:
    model = MLP()
    walk = python_walk(model, mlp_batch, wrap)
    local = [plain_local(model, mlp_batch, rank) for rank in range(2)]
    for rank in walk.ranks:
        grads = {item.name: item for item in rank_pass(rank, "full").grads}
        for name, mine in local[rank.rank].items():
            mean = (local[0][name] + local[1][name]) / 2
            expected = mean if wrap == "ddp" else mean[fsdp_rows(mean.shape[0], rank.rank)]
            assert close(grads[name].value, expected), (rank.rank, name)
            if wrap == "ddp":
                assert close(hook_values(rank, "full", "tensor", name)[0], mine)
    assert not walk.failures()


def test_a_parameter_used_on_one_rank_only() -> None:
    """find_unused_parameters: rank 0 never uses `extra`, none of its hooks fire there, and its
    .grad on rank 0 is rank 1's gradient / 2."""
    model = OneRankOnly()
    batch = torch.tensor([[-1.0, 2.0], [3.0, 0.5]])  # rank 0's row negative, rank 1's positive
    walk = python_walk(model, batch, "ddp", DDPOptions(find_unused_parameters=True))
    rank1 = plain_local(model, batch, 1)
    first = walk.ranks[0]
    silent = {(item.hook, item.target) for item in rank_pass(first, "full").silent}
    assert ("tensor", "extra.weight") in silent and ("post_accumulate_grad", "extra.bias") in silent
    grads = {item.name: item for item in rank_pass(first, "full").grads}
    assert close(grads["extra.weight"].value, rank1["extra.weight"] / 2)
    assert grads["extra.weight"].check is not None and grads["extra.weight"].check.verified
    assert any(item.key == "unused_parameter" for item in walk.pitfalls)
    for rank in walk.ranks:  # no rank uses `never`: no hook fires, DDP leaves .grad None
        never = next(item for item in rank_pass(rank, "full").grads if item.name == "never.weight")
        assert never.value is None and verified(never.check)
        # Not "the mean over 2 ranks ... DDP wrote the averaged bucket into .grad".
        assert never.whose.scope == "local" and "mean" not in never.whose.text
        assert "no rank's forward used it" in never.whose.when
        why = next(item.why for item in rank_pass(rank, "full").silent
                   if (item.hook, item.target) == ("tensor", "never.weight"))
        assert "no rank used it" in why and "other ranks" not in why
    assert not walk.failures()


# --- a wrong claim cannot pass ----------------------------------------------------------------

@pytest.fixture
def claims_flipped(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """DDP's reading with every all-reduced bucket ignored: each parameter's .grad then
    claims to be the rank's own gradient, which it is not."""
    original: Callable[..., RankPass] = label._Reading.ddp

    def wrong(self: label._Reading) -> RankPass:
        trace = self.trace
        self.trace = dataclasses.replace(trace, buckets=())
        try:
            return original(self)
        finally:
            self.trace = trace

    monkeypatch.setattr(label._Reading, "ddp", wrong)
    yield


def test_a_wrong_whose_fails_its_check(claims_flipped: None) -> None:
    walk = facts_walk("ddp")
    for rank in walk.ranks:
        grads = {item.name: item for item in rank_pass(rank, "full").grads}
        assert grads["fc2.weight"].whose.scope == "local"  # the wrong claim
        assert grads["fc2.weight"].check is not None
        assert not grads["fc2.weight"].check.verified
    assert walk.failures()


def test_a_failed_call_leaves_the_buckets_unchecked_and_says_why() -> None:
    """A second backward without retain_graph: torch refuses it, the single-process runs stop
    there, so the bucket of call 1 is left unchecked, with the reason in the records and the
    JSON (and the values are still plain torch's)."""
    from jsonschema import Draft202012Validator

    from gradexplain.render.distributed_json import distributed_json
    from gradexplain.schemas import load_schema

    text = FACTS_MODEL.replace("backward: loss", "backward: {of: loss, times: 2}")
    walk = distributed_walk(text, FACTS_INPUTS, "ddp")
    for rank in walk.ranks:
        (bucket,) = rank_pass(rank, "full").buckets
        for slot in bucket.slots:
            assert slot.before_check is None and slot.after_check is None
            assert slot.not_checked is not None
            assert close(slot.before, facts_local(rank.rank)[slot.parameter])
    document = distributed_json(walk)
    slots = [slot for rank in document["ranks"] for walk_pass in rank["passes"]
             for bucket in walk_pass["buckets"] for slot in bucket["slots"]]
    assert slots and all(slot["not_checked"] for slot in slots)
    Draft202012Validator(load_schema("walk-distributed")).validate(document)


@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_a_pass_of_autograd_grad_alone_says_no_gradient_was_written(wrap: WrapKind) -> None:
    """autograd.grad hands its gradients back and writes no .grad: plain DDP and FSDP2 leave
    every parameter's .grad None, and the walk says why, not that a call failed."""
    text = FACTS_MODEL.replace("backward: loss", "grad:\n  - {of: loss, wrt: [fc2.weight]}")
    model = facts_model()
    loss = model(torch.tensor(FACTS_INPUTS[0]["x"])).sum()
    torch.autograd.grad(loss, [model.get_parameter("2.weight")])
    assert all(parameter.grad is None for parameter in model.parameters())
    walk = distributed_walk(text, FACTS_INPUTS, wrap)
    for rank in walk.ranks:
        for mode in ("legacy", "full"):
            grads = rank_pass(rank, mode).grads
            parameters = [grad for grad in grads if grad.name in NAMES]
            assert parameters
            for grad in parameters:
                assert grad.value is None and grad.check is None
                assert grad.not_checked is not None and "failed" not in grad.not_checked
                assert "more than one" not in grad.not_checked
                assert "no backward call" in grad.whose.when


def test_fsdp_two_backward_calls_say_grad_holds_the_sum_of_their_means() -> None:
    """Each backward call's reduce-scatter adds that call's mean into the sharded .grad: after
    the second of two identical calls it holds twice the mean, which the label says."""
    text = FACTS_MODEL.replace("backward: loss",
                               "backward: {of: loss, retain_graph: true, times: 2}")
    walk = distributed_walk(text, FACTS_INPUTS, "fsdp")
    mean = {name: (facts_local(0)[name] + facts_local(1)[name]) / 2 for name in NAMES}
    for rank in walk.ranks:
        scoped = {item.seq: item for item in rank_pass(rank, "full").scoped}
        for name, expected in mean.items():
            shard = expected[fsdp_rows(expected.shape[0], rank.rank)]
            events = [event for event in walk_pass(rank, "full").events
                      if event.hook == "post_accumulate_grad" and event.target == name]
            assert len(events) == 2
            for number, event in enumerate(events, start=1):
                assert close(event.args[0].value, number * shard)
                when = scoped[event.seq].whose.when
                assert ("2 backward calls" in when) == (number == 2), when
            grad = next(item for item in rank_pass(rank, "full").grads if item.name == name)
            assert close(grad.value, 2 * shard)
            assert "sum of their means" in grad.whose.when


def test_a_spec_with_interventions_is_told_they_are_not_run_on_the_ranks() -> None:
    text = FACTS_MODEL + ("interventions:\n  - {hook: full_backward, on: fc2, action: scale, "
                          "factor: 2}\n")
    walk = distributed_walk(text, FACTS_INPUTS, "ddp")
    (note,) = [note for note in walk.notes if "intervention" in note]
    assert "1 intervention(s)" in note and "without --ranks" in note
    # and they were not run: .grad is plain DDP's mean, unscaled
    mean = (facts_local(0)["fc2.bias"] + facts_local(1)["fc2.bias"]) / 2
    for rank in walk.ranks:
        grad = next(item for item in rank_pass(rank, "full").grads if item.name == "fc2.bias")
        assert close(grad.value, mean)


class UnusedByAll(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.used = nn.Linear(3, 2)
            self.never = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.used(x)
        return out


@pytest.mark.parametrize("find_unused", [False, True])
def test_one_unused_parameter_and_ddp_averages_nothing(mlp_batch: torch.Tensor,
                                                        find_unused: bool) -> None:
    """torch's defaults: a parameter no rank uses keeps its bucket from becoming ready, so no
    all-reduce runs and every .grad stays each rank's own (plain torch's single-process
    gradients), which the pitfalls say; with find_unused_parameters the rest is averaged."""
    model = UnusedByAll()
    walk = python_walk(model, mlp_batch, "ddp", DDPOptions(find_unused_parameters=find_unused))
    local = [plain_local(model, mlp_batch, rank) for rank in range(2)]
    for rank in walk.ranks:
        grad = next(item for item in rank_pass(rank, "full").grads
                    if item.name == "used.weight")
        mean = (local[0]["used.weight"] + local[1]["used.weight"]) / 2
        assert close(grad.value, mean if find_unused else local[rank.rank]["used.weight"])
    said = [item for item in walk.pitfalls if item.key == "unused_stops_the_all_reduce"]
    assert bool(said) == (not find_unused)
    if said:
        assert "never.weight" in said[0].text and "find_unused_parameters=True" in said[0].text
    assert not walk.failures()


class SparseLookup(nn.Module):
    """Embedding(sparse=True): DDP hands its sparse gradient over in a bucket of its own."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.table = nn.Embedding(10, 3, sparse=True)
        self.out = nn.Linear(3, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.out(self.table(ids))
        return result


def test_a_sparse_gradient_in_a_bucket_is_its_dense_values() -> None:
    """The bucket recorder cut a sparse gradient as a flat buffer: rank 1 failed with torch's
    NotImplementedError, where plain DDP runs. Its slot is now the dense gradient: this rank's
    own before the all-reduce, the sum after, as plain torch gives them."""
    model = SparseLookup()
    ids = torch.tensor([[1, 2, 2], [3, 1, 9], [4, 4, 0], [9, 8, 1]])
    walk = python_walk(model, ids, "ddp")
    assert not walk.failures()
    local = []
    for half in ids.chunk(2):
        mine = copy.deepcopy(model)
        mine(half).sum().backward()
        assert mine.table.weight.grad is not None and mine.table.weight.grad.is_sparse
        local.append(mine.table.weight.grad.to_dense())
    for rank in walk.ranks:
        slots = [slot for bucket in rank_pass(rank, "full").buckets for slot in bucket.slots
                 if slot.parameter == "table.weight"]
        assert len(slots) == 1
        assert close(slots[0].before, local[rank.rank])
        assert close(slots[0].after, local[0] + local[1])


class TwoHeads(nn.Module):
    """Two outputs; the loss takes only the first (`--loss-of 0`)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(9)
        self.body, self.h1, self.h2 = nn.Linear(3, 4), nn.Linear(4, 1), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.relu(self.body(x))
        return self.h1(z), self.h2(z)


def test_full_hooks_that_make_ddp_average_are_said_to() -> None:
    """The full pass's hook on the model wraps both outputs in one node, so h2, which only the
    ignored output reads, gets zeros and DDP averages every bucket; without full hooks (the
    legacy pass, and plain DDP) no bucket is ready and every .grad stays the rank's own. The
    walk showed the full pass's "mean" with nothing saying the two passes disagree."""
    from gradexplain.output_path import parse_output_path

    model = TwoHeads()
    batch = torch.randn(4, 3, generator=torch.Generator().manual_seed(12))
    sources = [python_source(model, inputs, "test:model", output=parse_output_path("0"))
               for inputs in split_batch((batch,), 2)]
    plan = Plan(tuple(item.spec for item in sources), "test:model", sources[0].description,
                Setup(2, "ddp", DEFAULTS), tuple(item.build for item in sources), 1000, 1)
    walk = capture_distributed(plan)
    local = []
    for half in batch.chunk(2):
        mine = copy.deepcopy(model)
        mine(half)[0].sum().backward()
        assert mine.h1.weight.grad is not None and mine.h2.weight.grad is None
        local.append(mine.h1.weight.grad)
    for rank in walk.ranks:
        legacy = {item.name: item for item in rank_pass(rank, "legacy").grads}
        full = {item.name: item for item in rank_pass(rank, "full").grads}
        assert close(legacy["h1.weight"].value, local[rank.rank])
        assert close(full["h1.weight"].value, (local[0] + local[1]) / 2)
    keys = [pitfall.key for pitfall in walk.pitfalls]
    assert "full_hooks_change_ddp" in keys


def _times_ten(parameter: torch.Tensor) -> None:
    assert parameter.grad is not None
    parameter.grad.mul_(10)


class OwnParameterHooks(nn.Module):
    """Hooks of the model's own on its parameters: a tensor hook tripling l1.weight's
    gradient, a post-accumulate hook multiplying l2.bias's .grad by 10."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(13)
        self.l1, self.l2 = nn.Linear(3, 3), nn.Linear(3, 1)
        self.l1.weight.register_hook(lambda grad: grad * 3)
        self.l2.bias.register_post_accumulate_grad_hook(_times_ten)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.l2(torch.relu(self.l1(x)))
        return result


def test_the_reference_leaves_the_models_own_backward_hooks_out(mlp_batch: torch.Tensor) -> None:
    """The single-process reference ran the model's own parameter hooks (its docstring says
    hook-free). Under FSDP2 they never run (fully_shard replaces the parameters), so the
    walk's correct .grad was 'FAILED' against a reference holding the hooks' x3 and x10. Now
    every check holds under both wrappings, and FSDP2's .grad is plain torch's hook-free
    mean."""
    model = OwnParameterHooks()
    hook_free = copy.deepcopy(model)
    hook_free.l1.weight._backward_hooks = {}
    hook_free.l2.bias._post_accumulate_grad_hooks = {}
    local = [plain_local(hook_free, mlp_batch, rank) for rank in range(2)]
    for wrap in ("ddp", "fsdp"):
        walk = python_walk(model, mlp_batch, wrap)
        assert not walk.failures(), wrap
        if wrap == "fsdp":
            for rank in walk.ranks:
                grads = {item.name: item for item in rank_pass(rank, "full").grads}
                mean = (local[0]["l2.bias"] + local[1]["l2.bias"]) / 2
                assert close(grads["l2.bias"].value, mean[fsdp_rows(mean.shape[0], rank.rank)])
