"""`gradexplain walk --format json` on one small inline spec per case family of
../shared/reference/torch-hook-facts.md, each against plain PyTorch computed here.

Families: operand order of the last op (A1, B08); None entries for Python scalars and inputs that
do not require grad (B01, B06, B07); nn.Linear's AddmmBackward0 and its MmBackward0 /
SqueezeBackward4 / ViewBackward0 / UnsafeViewBackward0 variants (B08); broadcasting; zeros for
non-requiring inputs in full hooks (B06); tuple outputs (B02); the BackwardHookFunctionBackward
wrappers of full hooks (A2, E1); nested modules sharing a last node (B10); a module called twice
(B09).

The cases (spec texts, and the plain-torch oracles written from the same Python numbers) are in
tests/helpers/labelcases.py. Each spec is walked once (all side by side, in a module-scoped
fixture) and read by several tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.helpers.cli import run_cli
from tests.helpers.labelcases import (
    BROAD,
    CASES,
    LINEAR_CASES,
    NONE,
    LinearCase,
    Plain,
    plain_module_hook_order,
)
from tests.helpers.walkjson import (
    JSON,
    MODES,
    MODULE_BACKWARD_HOOKS,
    WRAPPER,
    Walk,
    args_named,
    assert_grad_arg,
    assert_grads,
    assert_meaning,
    assert_none,
    assert_value,
    assert_verified,
    contract_problems,
    describe,
    get,
    run_all,
    value_tensor,
)


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Walk | AssertionError]:
    """Every case spec walked once, side by side; keyed by case name."""
    folder = tmp_path_factory.mktemp("walk_cases")
    paths: list[Path] = []
    for name, (text, _) in CASES.items():
        path = folder / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    results = run_all(paths)
    return {path.stem: results[str(path)] for path in paths}


@pytest.fixture(scope="module")
def plain() -> dict[str, Plain]:
    return {name: make() for name, (_, make) in CASES.items()}


def test_case_specs_are_valid(write_spec: Callable[[str, str], Path]) -> None:
    paths = [str(write_spec(text, f"{name}.yaml")) for name, (text, _) in CASES.items()]
    result = run_cli("validate", *paths)
    assert result.code == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", list(CASES))
def test_case_walks_with_every_check_verified(walked: dict[str, Walk | AssertionError],
                                              name: str) -> None:
    walk_ = get(walked, name)
    problems = contract_problems(walk_.doc)
    assert problems == [], "\n".join(problems[:40])
    assert walk_.code == 0, walk_.stderr[-2000:]
    assert [item["mode"] for item in walk_.passes()] == list(MODES)


@pytest.mark.parametrize("name", list(CASES))
def test_case_grads_match_plain_torch(walked: dict[str, Walk | AssertionError],
                                      plain: dict[str, Plain], name: str) -> None:
    assert_grads(get(walked, name), plain[name].grads)


def module_event(walk_: Walk, mode: str, target: str) -> JSON:
    return walk_.event(mode, "backward" if mode == "legacy" else "full_backward", target)


# --- operand order -------------------------------------------------------------------------------


def test_legacy_grad_input_follows_the_operand_order_of_the_last_op(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "operand_order"), plain["operand_order"].named
    for target, wrts, output in (("px", ("px.p", "x"), "y"),   # p * h
                                 ("xp", ("u", "xp.p"), "w"),   # h * p
                                 ("ba", ("b", "a"), "o")):     # b * a, args (a, b)
        event = module_event(walk_, "legacy", target)
        assert event["node"] == "MulBackward0", describe(event)
        grad_input = args_named(event, "grad_input")
        assert len(grad_input) == 2, describe(event)
        for item, wrt in zip(grad_input, wrts, strict=True):
            assert_grad_arg(item, named[wrt], of="s", wrt=wrt, what=describe(event))
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, named[output], of="s", wrt=output, what=describe(event))


def test_full_grad_input_follows_the_module_arguments(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "operand_order"), plain["operand_order"].named
    for target, wrts in (("px", ("x",)), ("xp", ("u",)), ("ba", ("a", "b"))):
        event = module_event(walk_, "full", target)
        assert event["node"] == WRAPPER, describe(event)
        grad_input = args_named(event, "grad_input")
        assert len(grad_input) == len(wrts), describe(event)  # never a parameter gradient
        for item, wrt in zip(grad_input, wrts, strict=True):
            assert_grad_arg(item, named[wrt], of="s", wrt=wrt, what=describe(event))


# --- None entries and zeros ---------------------------------------------------------------------


def test_legacy_none_for_a_python_scalar_and_an_input_without_grad(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "none_entries"), plain["none_entries"].named
    for target, wrt in (("scale", "x"), ("gate", "a")):  # h * 3.0; h * g, g without grad
        event = module_event(walk_, "legacy", target)
        assert event["node"] == "MulBackward0"
        first, second = args_named(event, "grad_input")
        assert_grad_arg(first, named[wrt], of="s", wrt=wrt, what=describe(event))
        assert_none(second, describe(event))
    event = module_event(walk_, "legacy", "lin")  # Linear on an input without grad
    assert event["node"] == "AddmmBackward0"
    bias, middle, weight = args_named(event, "grad_input")
    assert_grad_arg(bias, named["lin.bias"], of="s", wrt="lin.bias", what=describe(event))
    assert_none(middle, describe(event))
    assert_grad_arg(weight, named["lin.weight"].T, of="s", wrt="lin.weight", layout="transposed",
                    what=describe(event))


def test_full_hook_gives_zeros_for_an_input_not_requiring_grad(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "none_entries"), plain["none_entries"].named
    event = module_event(walk_, "full", "gate")
    first, second = args_named(event, "grad_input")
    assert_grad_arg(first, named["a"], of="s", wrt="a", what=describe(event))
    assert_value(second, torch.zeros(len(NONE["k"])), describe(event))
    assert_meaning(second, of="s", wrt="k", what=describe(event))
    assert_verified(second, describe(event))
    (scale_input,) = args_named(module_event(walk_, "full", "scale"), "grad_input")
    assert_grad_arg(scale_input, named["x"], of="s", wrt="x")


def test_full_hook_gives_none_when_no_input_requires_grad(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "none_entries"), plain["none_entries"].named
    event = module_event(walk_, "full", "lin")
    (grad_input,) = args_named(event, "grad_input")
    assert_none(grad_input, describe(event))
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, named["v"], of="s", wrt="v", what=describe(event))


# --- nn.Linear -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda case: f"{case.layer}-{case.node}")
def test_legacy_linear_node_and_grad_input(walked: dict[str, Walk | AssertionError],
                                           plain: dict[str, Plain], case: LinearCase) -> None:
    walk_, named = get(walked, "linear"), plain["linear"].named
    event = module_event(walk_, "legacy", case.layer)
    what = describe(event)
    assert event["node"] == case.node, what
    grad_input = args_named(event, "grad_input")
    weight, bias = f"{case.layer}.weight", f"{case.layer}.bias"
    if case.node == "AddmmBackward0":
        assert len(grad_input) == 3, what
        assert_grad_arg(grad_input[0], named[bias], of="s", wrt=bias, what=what)
        assert_grad_arg(grad_input[1], named[case.input], of="s", wrt=case.input, what=what)
        assert_grad_arg(grad_input[2], named[weight].T, of="s", wrt=weight, layout="transposed",
                        what=what)
    elif case.node == "MmBackward0":
        assert len(grad_input) == 2, what
        assert_grad_arg(grad_input[0], named[case.input], of="s", wrt=case.input, what=what)
        assert_grad_arg(grad_input[1], named[weight].T, of="s", wrt=weight, layout="transposed",
                        what=what)
    else:  # a view of the 2-D product: the layer output, reshaped to [rows, out]
        assert len(grad_input) == 1, what
        assert_grad_arg(grad_input[0], named[case.output].reshape(-1, 2), of="s",
                        wrt=case.output, layout="reshaped", what=what)
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, named[case.output], of="s", wrt=case.output, what=what)


@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda case: case.layer)
def test_full_linear_is_input_and_output(walked: dict[str, Walk | AssertionError],
                                         plain: dict[str, Plain], case: LinearCase) -> None:
    walk_, named = get(walked, "linear"), plain["linear"].named
    event = module_event(walk_, "full", case.layer)
    assert event["node"] == WRAPPER
    (grad_input,) = args_named(event, "grad_input")
    assert_grad_arg(grad_input, named[case.input], of="s", wrt=case.input, what=describe(event))
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, named[case.output], of="s", wrt=case.output,
                    what=describe(event))


# --- broadcasting --------------------------------------------------------------------------------


def test_legacy_broadcast_operands_get_their_own_shapes(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "broadcast"), plain["broadcast"].named
    event = module_event(walk_, "legacy", "m")  # p [3] * x []
    assert event["node"] == "MulBackward0"
    grad_p, grad_x = args_named(event, "grad_input")
    assert_grad_arg(grad_p, named["m.p"], of="s", wrt="m.p", what=describe(event))
    assert_grad_arg(grad_x, named["x"], of="s", wrt="x", what=describe(event))
    assert grad_x["shape"] == []
    # dL/dx is dL/dy * p summed over the broadcast dimension.
    summed = (named["y"] * torch.tensor(BROAD["m.p"])).sum()
    assert value_tensor(grad_x).item() == pytest.approx(summed.item(), rel=1e-5)
    event = module_event(walk_, "legacy", "n")  # r [2, 1] * q [3]
    grad_r, grad_q = args_named(event, "grad_input")
    assert_grad_arg(grad_r, named["r"], of="s", wrt="r", what=describe(event))
    assert_grad_arg(grad_q, named["n.q"], of="s", wrt="n.q", what=describe(event))
    assert (grad_r["shape"], grad_q["shape"]) == ([2, 1], [3])


# --- tuple outputs -------------------------------------------------------------------------------


def test_legacy_tuple_from_two_nodes_sees_the_first_output_only(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, case = get(walked, "tuple_outputs"), plain["tuple_outputs"]
    event = module_event(walk_, "legacy", "two")
    assert event["node"] == "MulBackward0"
    through_a, scalar = args_named(event, "grad_input")
    assert_grad_arg(through_a, case.contrib["x via a"], of="s", wrt="x", only=True,
                    what=describe(event))
    assert not torch.allclose(case.contrib["x via a"], case.named["x"])  # a part, not all
    assert_none(scalar, describe(event))
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, case.named["p"], of="s", wrt="p", what=describe(event))


def test_legacy_tuple_from_one_node_sees_both_outputs(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "tuple_outputs"), plain["tuple_outputs"].named
    event = module_event(walk_, "legacy", "halves")
    assert event["node"] == "SplitBackward0"
    (grad_input,) = args_named(event, "grad_input")
    assert_grad_arg(grad_input, named["v"], of="s", wrt="v", only=False, what=describe(event))
    first, second = args_named(event, "grad_output")
    assert_grad_arg(first, named["f"], of="s", wrt="f", what=describe(event))
    assert_grad_arg(second, named["g"], of="s", wrt="g", what=describe(event))


def test_full_tuple_outputs_are_all_seen(walked: dict[str, Walk | AssertionError],
                                         plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "tuple_outputs"), plain["tuple_outputs"].named
    for target, wrt, outputs in (("two", "x", ("p", "q")), ("halves", "v", ("f", "g"))):
        event = module_event(walk_, "full", target)
        (grad_input,) = args_named(event, "grad_input")
        assert_grad_arg(grad_input, named[wrt], of="s", wrt=wrt, only=False, what=describe(event))
        pre = walk_.event("full", "full_backward_pre", target)
        for hooked in (event, pre):
            items = args_named(hooked, "grad_output")
            assert len(items) == len(outputs), describe(hooked)
            for item, output in zip(items, outputs, strict=True):
                assert_grad_arg(item, named[output], of="s", wrt=output, what=describe(hooked))


# --- nested modules sharing a last node ---------------------------------------------------------


def test_legacy_nested_hooks_share_the_last_node_child_first(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "nested"), plain["nested"].named
    tanh = walk_.events("legacy", "backward", node="TanhBackward0")
    assert [event["target"] for event in tanh] == ["outer.inner.act", "outer.inner", "outer"]
    for event in tanh:
        (grad_input,) = args_named(event, "grad_input")
        assert_grad_arg(grad_input, named["outer.g"], of="s", wrt="outer.g", what=describe(event))
        assert grad_input["meaning"]["aliases"] == ["outer.inner.u"]
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, named["y"], of="s", wrt="y", what=describe(event))
        assert grad_output["meaning"]["aliases"] == ["outer.inner.v", "outer.o"]


def test_full_nested_hooks_name_tensors_as_the_legacy_pass_does(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    """The BackwardHookFunction views a full hook puts around a tensor are that tensor: each
    module's input and output get the same canonical name as in the legacy pass."""
    walk_, named = get(walked, "nested"), plain["nested"].named
    for target, wrt in (("outer", "x"), ("outer.inner", "outer.g"),
                        ("outer.inner.act", "outer.g")):
        event = module_event(walk_, "full", target)
        (grad_input,) = args_named(event, "grad_input")
        assert_grad_arg(grad_input, named[wrt], of="s", wrt=wrt, what=describe(event))
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, named["y"], of="s", wrt="y", what=describe(event))


@pytest.mark.parametrize("mode", MODES)
def test_module_backward_hooks_fire_in_torchs_order(walked: dict[str, Walk | AssertionError],
                                                    mode: str) -> None:
    walk_ = get(walked, "nested")
    ours = [(event["hook"], event["target"]) for event in walk_.events(mode)
            if event["hook"] in MODULE_BACKWARD_HOOKS]
    assert ours == plain_module_hook_order(mode)


# --- the BackwardHookFunctionBackward wrappers of full hooks --------------------------------------


@pytest.mark.parametrize("name", ["nested", "twice", "operand_order"])
def test_full_hooks_sit_on_wrapper_nodes_and_legacy_never_does(
        walked: dict[str, Walk | AssertionError], name: str) -> None:
    walk_ = get(walked, name)
    full = [event for event in walk_.events("full")
            if event["hook"] in ("full_backward_pre", "full_backward")]
    assert full and all(event["node"] == WRAPPER for event in full)
    assert not [event for event in walk_.events("legacy") if event["node"] == WRAPPER]
    wrappers = walk_.events("full", "node", node=WRAPPER)
    assert wrappers, "no node hook fired on a BackwardHookFunctionBackward in the full pass"
    for event in wrappers:  # an identity: what goes in comes out
        grad_inputs = args_named(event, "grad_inputs")
        grad_outputs = args_named(event, "grad_outputs")
        assert len(grad_inputs) == len(grad_outputs), describe(event)
        for into, out in zip(grad_inputs, grad_outputs, strict=True):
            if out.get("value") is None:
                continue
            assert into["value"] == out["value"], describe(event)
            assert_verified(into, describe(event))
            assert into["meaning"]["of"] == "s", describe(event)


# --- a module called twice -----------------------------------------------------------------------


def test_legacy_layer_called_twice_sees_each_calls_contribution(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, case = get(walked, "twice"), plain["twice"]
    events = walk_.events("legacy", "backward", "lin")
    assert len(events) == 2
    for event, call, wrt_in, wrt_out in zip(events, (2, 1), ("h1", "x"), ("h2", "h1"),
                                            strict=True):
        what = f"{describe(event)} (call {call})"
        assert event["node"] == "AddmmBackward0", what
        bias, middle, weight = args_named(event, "grad_input")
        assert_grad_arg(bias, case.contrib[f"lin.bias#{call}"], of="s", wrt="lin.bias",
                        only=True, what=what)
        assert_grad_arg(middle, case.named[wrt_in], of="s", wrt=wrt_in, only=False, what=what)
        assert_grad_arg(weight, case.contrib[f"lin.weight#{call}"].T, of="s", wrt="lin.weight",
                        layout="transposed", only=True, what=what)
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, case.named[wrt_out], of="s", wrt=wrt_out, what=what)
    # The two contributions add up to the shared weight's gradient.
    total = case.contrib["lin.weight#1"] + case.contrib["lin.weight#2"]
    assert torch.allclose(total, case.named["lin.weight"], atol=1e-6)


def test_legacy_module_called_twice_names_the_second_call(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, case = get(walked, "twice"), plain["twice"]
    events = walk_.events("legacy", "backward", "blk")
    assert len(events) == 2
    for event, call, step, output in zip(events, (2, 1), ("blk.g@2", "blk.g"), ("y2", "y1"),
                                         strict=True):
        what = f"{describe(event)} (call {call})"
        assert event["node"] == "MulBackward0", what
        grad_g, grad_w = args_named(event, "grad_input")
        assert_grad_arg(grad_g, case.named[step], of="s", wrt=step, what=what)
        assert_grad_arg(grad_w, case.contrib[f"blk.w#{call}"], of="s", wrt="blk.w", only=True,
                        what=what)
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, case.named[output], of="s", wrt=output, what=what)


def test_full_module_called_twice_sees_each_calls_input(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "twice"), plain["twice"].named
    for target, calls in (("lin", (("h1", "h2"), ("x", "h1"))),
                          ("blk", (("y1", "y2"), ("v", "y1")))):
        events = walk_.events("full", "full_backward", target)
        assert len(events) == 2
        for event, (wrt_in, wrt_out) in zip(events, calls, strict=True):
            (grad_input,) = args_named(event, "grad_input")
            assert_grad_arg(grad_input, named[wrt_in], of="s", wrt=wrt_in, what=describe(event))
            (grad_output,) = args_named(event, "grad_output")
            assert_grad_arg(grad_output, named[wrt_out], of="s", wrt=wrt_out,
                            what=describe(event))
