"""`distributed_diff` against plain torch: what the diff calls the same, changed, silenced or
added, on every rank, compared with single-process computations written here (each rank's own
gradient, the mean over ranks, FSDP2's rows of it), under DDP (default, no_sync,
find_unused_parameters) and FSDP2, for the facts file's model and models of our own. And a
reading of the wrapping that is wrong cannot pass as "the same".
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gradexplain.analysis.distributed_diff import distributed_diff
from gradexplain.analysis.distributed_pairs import same_values
from gradexplain.language.model import DDPOptions
from gradexplain.records.distributed import DistributedWalk, Whose
from gradexplain.records.distributed_diff import CallChange, PassChange
from gradexplain.records.trace import TensorValue
from tests.distributed.test_walk_labels import (
    MLP,
    NAMES,
    OneRankOnly,
    close,
    facts_local,
    fsdp_rows,
    plain_local,
)
from tests.helpers.distributed_diff import (
    MLP_BATCH,
    ONE_RANK_BATCH,
    DiffRun,
    facts_fixture,
    facts_plan,
    mlp_plan,
    one_rank_plan,
    python_plan,
    run,
)

MODES = ("legacy", "full")
ddp = facts_fixture("ddp")
fsdp = facts_fixture("fsdp")


def facts_mean(name: str) -> torch.Tensor:
    return (facts_local(0)[name] + facts_local(1)[name]) / 2


def calls(change: PassChange, hook: str, target: str) -> list[CallChange]:
    return [call for call in change.calls if call.hook == hook and call.target == target]


# --- DDP: every hook the same, .grad the mean ---------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_ddp_changes_no_hook_call(ddp: DiffRun, mode: str) -> None:
    for rank in range(2):
        change = ddp.pass_change(rank, mode)
        assert change.calls and all(call.kind == "same" for call in change.calls)
        assert change.single_calls == change.wrapped_calls == len(change.calls)
        local = facts_local(rank)
        for name in NAMES:
            for hook in ("tensor", "post_accumulate_grad"):
                (call,) = calls(change, hook, name)
                (arg,) = call.args
                # both sides are this rank's own gradient, as plain torch computes it
                assert close(arg.single.value if arg.single else None, local[name])
                assert close(arg.wrapped.value if arg.wrapped else None, local[name])
                assert arg.whose is not None and arg.whose.scope == "local"


def test_ddp_module_hooks_see_local_activation_gradients(ddp: DiffRun) -> None:
    for rank in range(2):
        (call,) = calls(ddp.pass_change(rank, "full"), "full_backward", "fc1")
        arg = next(item for item in call.args if item.name == "grad_output[0]")
        assert arg.same_value and arg.same_label
        expected = facts_local(rank)["fc1.bias"].unsqueeze(0)  # ∂loss/∂h: fc1.bias's gradient
        assert close(arg.single.value if arg.single else None, expected)
        assert close(arg.wrapped.value if arg.wrapped else None, expected)


@pytest.mark.parametrize("mode", MODES)
def test_ddp_grad_after_backward_is_the_mean(ddp: DiffRun, mode: str) -> None:
    for rank in range(2):
        grads = {grad.name: grad for grad in ddp.pass_change(rank, mode).grads}
        for name in NAMES:
            grad = grads[name]
            assert grad.changed
            assert grad.single is not None and grad.wrapped is not None
            assert close(grad.single.value, facts_local(rank)[name])
            assert close(grad.wrapped.value, facts_mean(name))
            assert grad.wrapped.whose.when in grad.reason
        # fc2.bias's gradient is 1 on both ranks: the mean is 1 too, still not the same quantity
        assert grads["fc2.bias"].equal and grads["fc2.bias"].changed
        assert not grads["fc1.weight"].equal
        assert not grads["x"].changed  # an input's gradient: no input requires grad here


@pytest.mark.parametrize("mode", MODES)
def test_ddp_buckets_are_calls_only_the_wrapping_made(ddp: DiffRun, mode: str) -> None:
    for rank in range(2):
        (bucket,) = ddp.pass_change(rank, mode).buckets
        slots = {slot.parameter: slot for slot in bucket.bucket.slots}
        assert set(slots) == set(NAMES)
        for name, slot in slots.items():
            assert close(slot.before, facts_local(rank)[name])
            assert close(slot.after, 2 * facts_mean(name))
        assert bucket.reason.startswith("only under DDP")
    verdict = ddp.rank(0).verdict
    assert verdict.startswith("wrapping changed only .grad after backward")
    assert "communication hook" in verdict


# --- FSDP2: parameter hooks silenced or changed, labels of gathered parameters -------------------

@pytest.mark.parametrize("mode", MODES)
def test_fsdp_tensor_hooks_are_silenced_with_the_walks_reason(fsdp: DiffRun, mode: str) -> None:
    for rank in range(2):
        change = fsdp.pass_change(rank, mode)
        rank_pass = fsdp.walk.ranks[rank].pass_named(mode)
        assert rank_pass is not None
        why = {(item.hook, item.target): item.why for item in rank_pass.silent}
        for name in NAMES:
            (call,) = calls(change, "tensor", name)
            assert call.kind == "silenced" and call.wrapped_seq is None
            assert call.reason == why[("tensor", name)]
            (arg,) = call.args
            assert close(arg.single.value if arg.single else None, facts_local(rank)[name])


@pytest.mark.parametrize("mode", MODES)
def test_fsdp_post_accumulate_hooks_see_the_mean_shard(fsdp: DiffRun, mode: str) -> None:
    for rank in range(2):
        for name in NAMES:
            (call,) = calls(fsdp.pass_change(rank, mode), "post_accumulate_grad", name)
            assert call.kind == "changed"
            (arg,) = call.args
            mean = facts_mean(name)
            assert close(arg.single.value if arg.single else None, facts_local(rank)[name])
            assert close(arg.wrapped.value if arg.wrapped else None,
                         mean[fsdp_rows(mean.shape[0], rank)])
            assert arg.whose is not None and arg.whose.scope == "mean"
            assert arg.whose.text in call.reason


def test_fsdp_module_hooks_keep_their_values(fsdp: DiffRun) -> None:
    """Module hooks see the same values under FSDP2, and FSDP2's own forward hooks (which
    gather and free the parameters) are not taken for the user's: nothing is added."""
    for rank in range(2):
        change = fsdp.pass_change(rank, "full")
        for call in change.calls:
            if call.hook in ("full_backward", "full_backward_pre", "forward") and not call.user:
                assert call.kind == "same", call
        assert not [call for call in change.calls if call.kind == "added"]
        assert not [call for call in change.calls if call.user is not None]
    assert "silenced" in fsdp.rank(0).verdict


# --- DDP options and models of our own -----------------------------------------------------------

def test_no_sync_changes_nothing() -> None:
    result = run(facts_plan("ddp", DDPOptions(no_sync=True)))
    for rank in range(2):
        for change in result.rank(rank).passes:
            assert all(call.kind == "same" for call in change.calls)
            for grad in change.grads:
                assert not grad.changed and grad.equal
                if grad.name in NAMES and grad.wrapped is not None:
                    assert close(grad.wrapped.value, facts_local(rank)[grad.name])
        assert result.rank(rank).verdict.startswith("wrapping changed nothing")


@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_mlp_with_a_batch_per_rank(wrap: str) -> None:
    result = run(mlp_plan(wrap))  # type: ignore[arg-type]
    model = MLP()
    local = [plain_local(model, MLP_BATCH, rank) for rank in range(2)]
    for rank in range(2):
        change = result.pass_change(rank, "full")
        for call in change.calls:
            if call.hook in ("full_backward", "full_backward_pre"):
                assert call.kind == "same", call
        # every value that changed is read by the distributed walk: none is unexplained
        for call in change.calls:
            if call.kind == "changed":
                assert any(arg.whose is not None for arg in call.args), call
        if wrap == "fsdp":
            # FSDP2's own node around the root's input renumbers the nodes after it; its
            # calls are the added ones, and the input's own AccumulateGrad still pairs
            added = [call for call in change.calls if call.kind == "added" and call.node]
            assert {call.node for call in added} == {"RegisterPostBackwardFunctionBackward"}
            assert all(call.node is not None and call.node in call.reason for call in added)
            (grad_of_x,) = [call for call in change.calls if call.hook == "node_pre"
                            and call.node == "torch::autograd::AccumulateGrad"
                            and call.args[0].single is not None
                            and call.args[0].single.meaning is not None
                            and call.args[0].single.meaning.wrt == "x"]
            assert grad_of_x.kind == "same"
        grads = {grad.name: grad for grad in change.grads}
        for name, mine in local[rank].items():
            mean = (local[0][name] + local[1][name]) / 2
            expected = mean if wrap == "ddp" else mean[fsdp_rows(mean.shape[0], rank)]
            grad = grads[name]
            assert grad.changed
            assert grad.single is not None and close(grad.single.value, mine)
            assert grad.wrapped is not None and close(grad.wrapped.value, expected)


def test_a_parameter_used_on_one_rank_only() -> None:
    """Rank 0 never uses `extra`: no hook of it fires in either run there, and its .grad goes
    from None (one process) to rank 1's gradient / 2 (DDP), with the walk's reason why."""
    result = run(one_rank_plan())
    rank1 = plain_local(OneRankOnly(), ONE_RANK_BATCH, 1)
    change = result.pass_change(0, "full")
    assert not calls(change, "tensor", "extra.weight")
    grad = next(item for item in change.grads if item.name == "extra.weight")
    assert grad.changed and grad.single is not None and grad.single.value is None
    assert grad.wrapped is not None and close(grad.wrapped.value, rank1["extra.weight"] / 2)
    assert "did not use extra.weight" in grad.reason


# --- the records decide, not the numbers ------------------------------------------------------

def test_a_local_reading_with_other_values_is_not_the_same(ddp: DiffRun) -> None:
    """Were the mean read as this rank's own gradient (a wrong reading), the numbers differ
    from the single-process walk's: the diff says so instead of calling it the same."""
    wrong = _with_grads_read_as_local(ddp.walk)
    diff = distributed_diff(ddp.singles, wrong)
    grads = {grad.name: grad for grad in diff.ranks[0].passes[0].grads}
    assert grads["fc1.weight"].changed
    assert "differ" in grads["fc1.weight"].reason
    # fc2.bias is 1 everywhere: read as local with equal numbers, nothing tells them apart
    assert not grads["fc2.bias"].changed


def _with_grads_read_as_local(walk: DistributedWalk) -> DistributedWalk:
    local = Whose("local", "rank's own gradient", "a wrong reading")
    ranks = tuple(dataclasses.replace(rank, passes=tuple(
        dataclasses.replace(item, grads=tuple(dataclasses.replace(grad, whose=local)
                                              for grad in item.grads))
        for item in rank.passes)) for rank in walk.ranks)
    return dataclasses.replace(walk, ranks=ranks)


def test_a_call_missing_under_the_wrapping_is_silenced_in_place(ddp: DiffRun) -> None:
    """A call the wrapped pass lacks comes right after the call it followed in one process."""
    rank = ddp.walk.ranks[0]
    walk_pass = rank.walk.passes[0]
    dropped = next(event for event in walk_pass.events if event.hook == "tensor"
                   and event.target == "fc2.weight")
    events = tuple(event for event in walk_pass.events if event is not dropped)
    changed = dataclasses.replace(rank, walk=dataclasses.replace(rank.walk, passes=(
        dataclasses.replace(walk_pass, events=events), *rank.walk.passes[1:])))
    diff = distributed_diff(ddp.singles, dataclasses.replace(
        ddp.walk, ranks=(changed, *ddp.walk.ranks[1:])))
    order = diff.ranks[0].passes[0].calls
    index = next(number for number, call in enumerate(order) if call.kind == "silenced")
    assert order[index].target == "fc2.weight" and order[index].single_seq == dropped.seq
    assert order[index - 1].single_seq == dropped.seq - 1
    assert "silenced" in diff.ranks[0].verdict


def test_same_values_within_the_checks_allowance() -> None:
    one = TensorValue((2,), "float32", [1.0, 2.0])
    assert same_values(one, TensorValue((2,), "float32", [1.0, 2.0 + 1e-6]))
    assert not same_values(one, TensorValue((2,), "float32", [1.0, 2.01]))
    assert not same_values(one, TensorValue((1, 2), "float32", [[1.0, 2.0]]))
    assert same_values(None, None) and not same_values(one, None)


def test_the_number_of_walks_must_match_the_ranks(ddp: DiffRun) -> None:
    with pytest.raises(ValueError, match="2 ranks"):
        distributed_diff(ddp.singles[:1], ddp.walk)


def double(grad: torch.Tensor) -> torch.Tensor:
    return 2 * grad


def test_a_users_hook_that_changes_what_ddp_all_reduces() -> None:
    """The user's tensor hook on out.weight returns 2·g: each rank puts its doubled gradient in
    the bucket, and .grad after backward is the mean of the doubled ones, as torch gives it."""
    model = MLP()
    model.out.weight.register_hook(double)
    result = run(python_plan(model, MLP_BATCH, "ddp"))
    # each rank's own gradient in plain torch, doubled as the hook doubles it
    local = [{name: 2 * grad if name == "out.weight" else grad
              for name, grad in plain_local(MLP(), MLP_BATCH, rank).items()}
             for rank in range(2)]
    for rank in range(2):
        change = result.pass_change(rank, "full")
        users = [call for call in change.calls if call.user == "double"]
        assert users and all(call.kind == "same" for call in users)
        (bucket,) = change.buckets
        slot = next(item for item in bucket.bucket.slots if item.parameter == "out.weight")
        assert slot.changed_by == "double" and "out.weight by your hook double" in bucket.reason
        assert close(slot.before, local[rank]["out.weight"])
        grad = next(item for item in change.grads if item.name == "out.weight")
        assert grad.changed and grad.wrapped is not None and grad.single is not None
        assert close(grad.single.value, local[rank]["out.weight"])
        assert close(grad.wrapped.value, (local[0]["out.weight"] + local[1]["out.weight"]) / 2)
