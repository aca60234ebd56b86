"""`gradexplain walk specs/two_modules.yaml --format json` against plain PyTorch: the acceptance
numbers of issue 3.

The article's model (tests/helpers/articles.py) is rebuilt in plain torch; every module, tensor,
leaf and node hook of both passes carries the gradient torch computes, labelled with what it is
the gradient of and with respect to (tests/helpers/specoracles.py has the oracle).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.articles import TwoModules
from tests.helpers.specoracles import Oracle, plain_two_modules
from tests.helpers.walkjson import (
    MODES,
    WRAPPER,
    Walk,
    arg,
    args_named,
    assert_grad_arg,
    assert_value,
    describe,
    value_tensor,
    walk,
)


@pytest.fixture(scope="module")
def two() -> Walk:
    return walk("specs/two_modules.yaml")


@pytest.fixture(scope="module")
def plain_two() -> tuple[Oracle, dict[str, torch.Tensor]]:
    return plain_two_modules()


def test_two_modules_legacy_module2_is_dz_dt_on_the_sigmoid(
        two: Walk, plain_two: tuple[Oracle, dict[str, torch.Tensor]]) -> None:
    named = plain_two[0].named
    event = two.event("legacy", "backward", "module2")
    assert event["node"] == "SigmoidBackward0"
    grad_input = args_named(event, "grad_input")
    assert len(grad_input) == 1
    item = grad_input[0]
    assert value_tensor(item).tolist() == pytest.approx([0.18746], abs=1e-5)
    assert_grad_arg(item, named["module2.t"], of="z", wrt="module2.t", only=False)
    assert "∂z/∂t" in item["meaning"]["text"]
    assert item["meaning"]["aliases"] == []
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, named["z"], of="z", wrt="z")


def test_two_modules_legacy_module_is_dz_dp_dz_dx_on_the_mul(
        two: Walk, plain_two: tuple[Oracle, dict[str, torch.Tensor]]) -> None:
    named = plain_two[0].named
    event = two.event("legacy", "backward", "module")
    assert event["node"] == "MulBackward0"
    grad_p, grad_x = args_named(event, "grad_input")
    assert value_tensor(grad_p).tolist() == pytest.approx([-0.13966, 0.05324], abs=1e-5)
    assert value_tensor(grad_x).item() == pytest.approx(-0.04120, abs=1e-5)
    assert_grad_arg(grad_p, named["module.p"], of="z", wrt="module.p")
    assert_grad_arg(grad_x, named["x"], of="z", wrt="x")
    assert "∂z/∂p" in grad_p["meaning"]["text"] and "∂z/∂x" in grad_x["meaning"]["text"]
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, named["y"], of="z", wrt="y")
    assert grad_output["meaning"]["aliases"] == ["module.y", "module2.x"]


def test_two_modules_full_hooks_are_dz_dy_and_dz_dx(
        two: Walk, plain_two: tuple[Oracle, dict[str, torch.Tensor]]) -> None:
    named = plain_two[0].named
    module2 = two.event("full", "full_backward", "module2")
    assert module2["node"] == WRAPPER
    (grad_y,) = args_named(module2, "grad_input")
    assert value_tensor(grad_y).tolist() == pytest.approx([-0.02793, 0.01065], abs=1e-5)
    assert_grad_arg(grad_y, named["y"], of="z", wrt="y")
    assert "∂z/∂y" in grad_y["meaning"]["text"]
    (grad_z,) = args_named(module2, "grad_output")
    assert_grad_arg(grad_z, named["z"], of="z", wrt="z")
    module = two.event("full", "full_backward", "module")
    assert module["node"] == WRAPPER
    (grad_x,) = args_named(module, "grad_input")  # no parameter gradient in a full hook
    assert value_tensor(grad_x).item() == pytest.approx(-0.04120, abs=1e-5)
    assert_grad_arg(grad_x, named["x"], of="z", wrt="x")
    assert "∂z/∂x" in grad_x["meaning"]["text"]
    (grad_output,) = args_named(module, "grad_output")
    assert_grad_arg(grad_output, named["y"], of="z", wrt="y")
    for target, wrt in (("module2", "z"), ("module", "y")):
        pre = two.event("full", "full_backward_pre", target)
        assert pre["node"] == WRAPPER
        (item,) = args_named(pre, "grad_output")
        assert_grad_arg(item, named[wrt], of="z", wrt=wrt)
        assert not args_named(pre, "grad_input")


def test_two_modules_linear_on_a_vector_sits_on_squeeze(
        two: Walk, plain_two: tuple[Oracle, dict[str, torch.Tensor]]) -> None:
    named = plain_two[0].named
    event = two.event("legacy", "backward", "module2.l")
    assert event["node"] == "SqueezeBackward4"
    (item,) = args_named(event, "grad_input")
    assert_grad_arg(item, named["module2.t"].reshape(1, 1), of="z", wrt="module2.t",
                    layout="reshaped")


def test_two_modules_three_legacy_hooks_share_the_sigmoid_child_first(
        two: Walk, plain_two: tuple[Oracle, dict[str, torch.Tensor]]) -> None:
    named = plain_two[0].named
    sigmoid = two.events("legacy", "backward", node="SigmoidBackward0")
    assert [event["target"] for event in sigmoid] == ["module2.activation", "module2", ""]
    for event in sigmoid:
        (item,) = args_named(event, "grad_input")
        assert_grad_arg(item, named["module2.t"], of="z", wrt="module2.t", what=describe(event))


def test_two_modules_grads_carry_the_published_numbers(two: Walk) -> None:
    for mode in MODES:
        grads = two.grads(mode)
        assert grads["x"] == pytest.approx(-0.04120, abs=1e-5)
        assert grads["module.p"] == pytest.approx([-0.13966, 0.05324], abs=1e-5)
        assert grads["module2.l.weight"][0] == pytest.approx([2.81195, 3.74927], abs=1e-5)


def test_two_modules_tensor_and_leaf_hooks_match_torch(
        two: Walk, plain_two: tuple[Oracle, dict[str, torch.Tensor]]) -> None:
    oracle = plain_two[0]
    for mode in MODES:
        tensor_events = two.events(mode, "tensor")
        targets = {event["target"] for event in tensor_events}
        assert {"x", "module.p", "module2.l.weight", "y", "module2.t", "z"} <= targets, targets
        for event in tensor_events:
            if event["target"] in oracle.named:
                # The hook's target is the object it sits on (in the full pass the raw
                # `module2.z` and the caller's view `z` are two objects); the label names the
                # tensor by its canonical name, with the target among its aliases. The value is
                # still compared with torch's gradient of the target.
                grad = arg(event, "grad")
                canonical = grad["meaning"]["wrt"]
                assert event["target"] in [canonical, *grad["meaning"]["aliases"]]
                assert_grad_arg(grad, oracle.named[event["target"]], of="z",
                                wrt=canonical, what=f"[{mode}] {describe(event)}")
        posts = two.events(mode, "post_accumulate_grad")
        assert sorted(event["target"] for event in posts) == sorted(oracle.grads)
        for event in posts:
            want = oracle.grads[event["target"]]
            assert want is not None
            assert_value(arg(event, "tensor"), want, f"[{mode}] {describe(event)}")


def test_two_modules_forward_values_match_torch(
        two: Walk, plain_two: tuple[Oracle, dict[str, torch.Tensor]]) -> None:
    values = plain_two[1]
    for mode in MODES:
        event = two.event(mode, "forward", "module2")
        assert_value(arg(event, "input[0]"), values["y"], f"[{mode}] {describe(event)}")
        assert_value(arg(event, "output"), values["z"], f"[{mode}] {describe(event)}")
        pre = two.event(mode, "forward_pre", "module")
        assert_value(arg(pre, "input[0]"), values["x"], f"[{mode}] {describe(pre)}")
        for item in event["args"] + pre["args"]:
            assert item["meaning"] is None and item["check"] is None


def plain_node_calls(mode: str) -> list[tuple[str, str, list[Any]]]:
    """Node pre-hook and hook calls of the article's model with every module hooked as `mode`."""
    import warnings

    def values(items: tuple[Any, ...]) -> list[Any]:
        return [None if item is None else item.detach().tolist() for item in items]

    top = TwoModules()
    handles = []
    for module in top.modules():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mode == "legacy":
                handles.append(module.register_backward_hook(lambda m, gi, go: None))
            else:
                handles.append(module.register_full_backward_pre_hook(lambda m, go: None))
                handles.append(module.register_full_backward_hook(lambda m, gi, go: None))
    x = torch.tensor(5.0, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = top(x)
    calls: list[tuple[str, str, list[Any]]] = []
    queue, seen = [z.grad_fn], set()
    while queue:
        node = queue.pop(0)
        if node is None or node in seen:
            continue
        seen.add(node)
        node.register_prehook(
            lambda go, n=node: calls.append(("node_pre", n.name(), values(go))))
        node.register_hook(
            lambda gi, go, n=node: calls.append(("node", n.name(), values(gi) + values(go))))
        queue.extend(child for child, _ in node.next_functions)
    z.backward()
    for handle in handles:
        handle.remove()
    return calls


@pytest.mark.parametrize("mode", MODES)
def test_two_modules_node_hooks_match_torch(two: Walk, mode: str) -> None:
    """Node hooks see the same nodes, in the same order, with the same values as plain torch
    with the same module hooks (so the full pass shows the BackwardHookFunctionBackward
    wrappers, and the legacy pass does not)."""
    plain = plain_node_calls(mode)
    ours = [(event["hook"], event["node"],
             [None if item.get("value") is None else item["value"] for item in event["args"]])
            for event in two.pass_(mode)["events"] if event["hook"] in ("node_pre", "node")]
    assert [call[:2] for call in ours] == [call[:2] for call in plain]
    for mine, theirs in zip(ours, plain, strict=True):
        assert torch.allclose(torch.tensor(_flat(mine[2]), dtype=torch.float64),
                              torch.tensor(_flat(theirs[2]), dtype=torch.float64),
                              equal_nan=True), (mine, theirs)
    assert (WRAPPER in {call[1] for call in plain}) == (mode == "full")


def _flat(values: Any) -> list[float]:
    if values is None:
        return [float("nan")]
    if isinstance(values, list):
        return [item for value in values for item in _flat(value)]
    return [float(values)]


def test_two_modules_node_hook_labels(two: Walk,
                                      plain_two: tuple[Oracle, dict[str, torch.Tensor]]) -> None:
    named = plain_two[0].named
    (sigmoid,) = two.events("legacy", "node", node="SigmoidBackward0")
    assert_grad_arg(arg(sigmoid, "grad_inputs[0]"), named["module2.t"], of="z", wrt="module2.t")
    assert_grad_arg(arg(sigmoid, "grad_outputs[0]"), named["z"], of="z", wrt="z")
    (mul,) = two.events("legacy", "node", node="MulBackward0")
    assert_grad_arg(arg(mul, "grad_inputs[0]"), named["module.p"], of="z", wrt="module.p")
    assert_grad_arg(arg(mul, "grad_inputs[1]"), named["x"], of="z", wrt="x")
    (pre,) = two.events("legacy", "node_pre", node="MulBackward0")
    assert_grad_arg(arg(pre, "grad_outputs[0]"), named["y"], of="z", wrt="y")
    assert str(pre["target"]).startswith("n") and pre["target"] == mul["target"]
