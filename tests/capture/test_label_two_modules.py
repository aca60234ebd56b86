"""`gradexplain walk SPEC --format json` on every spec in specs/, against plain PyTorch.

Every spec walks in both passes with every check verified; each pass's `grads`, and every labelled
gradient whose tensor the test can name, equal what torch computes here from the spec's own numbers
(random inits are redrawn the way DESIGN section 3 says: `torch.manual_seed(seed)`, then the inputs,
params and layers in spec order); and the acceptance numbers of issue 3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers.articles import MyModule, MyModule2, TwoModules
from tests.helpers.cli import SPECS
from tests.helpers.walkjson import (
    MODES,
    SCHEMA,
    WRAPPER,
    Walk,
    arg,
    args_named,
    assert_grad_arg,
    assert_grads,
    assert_meaning,
    assert_value,
    assert_verified,
    contract_problems,
    describe,
    get,
    run_all,
    value_tensor,
)

SPEC_FILES = sorted(SPECS.glob("*.yaml"))


def spec_key(path: Path) -> str:
    return f"specs/{path.name}"


@pytest.fixture(scope="module")
def walks() -> dict[str, Walk | AssertionError]:
    """Every spec in specs/ walked once (side by side), shared by all tests of this file."""
    return run_all([spec_key(path) for path in SPEC_FILES])


# --- plain PyTorch oracles ---------------------------------------------------------------------


@dataclass
class Oracle:
    """What torch says about one spec: the differentiated name, the gradient of it (with the
    spec's seed gradient) with respect to each tensor the test can name, which of those names
    walk must use as a label somewhere in each pass, and every leaf's final `.grad`."""

    of: str
    named: dict[str, torch.Tensor]
    must_see: set[str]
    grads: dict[str, torch.Tensor | None]
    modes: tuple[str, ...] = MODES  # passes whose labels can be compared with `named`
    grads_checked: dict[str, tuple[str, ...]] = field(default_factory=dict)  # mode -> leaves


def grads_of(output: torch.Tensor, tensors: dict[str, torch.Tensor],
             seed: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    names = list(tensors)
    found = torch.autograd.grad(output, [tensors[name] for name in names], seed,
                                retain_graph=True)
    return dict(zip(names, found, strict=True))


def plain_two_modules() -> tuple[Oracle, dict[str, torch.Tensor]]:
    """The article's classes (tests/helpers/articles.py); also returns the forward values."""
    m1, m2 = MyModule(), MyModule2()
    x = torch.tensor(5.0, requires_grad=True)
    y = m1(x)
    t = m2.l(y)
    z = m2.activation(t)
    named = grads_of(z, {"x": x, "module.p": m1.p, "module2.l.weight": m2.l.weight,
                         "y": y, "module2.t": t, "z": z})
    named["module.y"] = named["module2.x"] = named["y"]
    named["module2.z"] = named["z"]
    z.backward()
    grads = {"x": x.grad, "module.p": m1.p.grad, "module2.l.weight": m2.l.weight.grad}
    oracle = Oracle("z", named, {"x", "module.p", "module2.l.weight", "y", "module2.t", "z"},
                    grads)
    return oracle, {"x": x.detach(), "y": y.detach(), "t": t.detach(), "z": z.detach()}


def plain_matrix_chain() -> Oracle:
    inp = torch.tensor([1.0, 2.0])
    w_1 = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    w_2 = torch.tensor([[2.0, 3.0], [4.0, 2.0]], requires_grad=True)
    y_1 = w_1 @ inp
    y_2 = w_2 @ y_1
    output = y_2.sum()
    named = grads_of(output, {"w_1": w_1, "w_2": w_2, "y_1": y_1, "y_2": y_2,
                              "output": output})
    output.backward()
    return Oracle("output", named, {"w_1", "w_2", "y_1", "y_2"},
                  {"inp": None, "w_1": w_1.grad, "w_2": w_2.grad})


def plain_vector_backward() -> Oracle:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(2).requires_grad_(True)
    y = x * 3
    v = torch.tensor([100.0, 0.1])
    named = grads_of(y, {"x": x, "y": y}, v)
    y.backward(v, retain_graph=True)
    y.backward(v, retain_graph=True)
    return Oracle("y", named, {"x", "y"}, {"x": x.grad})


def plain_add_hooks() -> Oracle:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x1 = torch.rand(1).requires_grad_(True)
        x2 = torch.rand(1).requires_grad_(True)
    output = x1 + x2
    named = grads_of(output, {"x1": x1, "x2": x2, "output": output})
    named["add.x1"], named["add.x2"], named["add.output"] = (
        named["x1"], named["x2"], named["output"])
    output.backward()
    return Oracle("output", named, {"x1", "x2", "output"}, {"x1": x1.grad, "x2": x2.grad})


def plain_mul_param() -> Oracle:
    """output = x1 * x2 * W. The spec also declares an intervention on the full backward hook of
    `model`; whatever it does, it cannot change W's gradient (torch-hook-facts C01: a full hook's
    replacement leaves its own module's parameter grads alone), so the full pass compares only
    that; the legacy pass (no full hooks, nothing to intervene on) compares everything."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x1 = torch.rand(1).requires_grad_(True)
        x2 = torch.rand(1).requires_grad_(True)
        w = nn.Parameter(torch.tensor([5.0]))
    h = x1 * x2
    output = h * w
    named = grads_of(output, {"x1": x1, "x2": x2, "model.W": w, "model.h": h,
                              "output": output})
    named["model.output"] = named["output"]
    output.backward()
    return Oracle("output", named, {"x1", "x2", "model.W", "model.h"},
                  {"x1": x1.grad, "x2": x2.grad, "model.W": w.grad}, modes=("legacy",),
                  grads_checked={"legacy": ("x1", "x2", "model.W"), "full": ("model.W",)})


def plain_embedding() -> Oracle:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        idx = torch.tensor([1, 3, 1])
        c = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
        emb = nn.Embedding(5, 3)
    e = emb(idx)
    loss = (e * c).sum()
    named = grads_of(loss, {"emb.weight": emb.weight, "e": e, "loss": loss})
    loss.backward()
    return Oracle("loss", named, {"emb.weight", "e"},
                  {"idx": None, "c": None, "emb.weight": emb.weight.grad})


def plain_cnn_hooks() -> Oracle:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        image = torch.randn(1, 3, 8, 8).requires_grad_(True)
        layers = {
            "conv1": nn.Conv2d(3, 4, kernel_size=3, padding=1), "relu1": nn.ReLU(),
            "pool1": nn.MaxPool2d(kernel_size=2),
            "conv2": nn.Conv2d(4, 8, kernel_size=3, padding=1), "relu2": nn.ReLU(),
            "pool2": nn.MaxPool2d(kernel_size=2), "flat": nn.Flatten(),
            "fc": nn.Linear(32, 10),
        }
    values: dict[str, torch.Tensor] = {"image": image}
    h = image
    steps = ("c1", "r1", "p1", "c2", "r2", "p2", "f", "scores")
    for layer, step in zip(layers.values(), steps, strict=True):
        h = layer(h)
        values[f"net.{step}"] = h
    scores = h
    score = scores[0, 3]
    values["scores"] = scores
    values["score"] = score
    params = {f"net.{name}.{key}": value for name, layer in layers.items()
              for key, value in layer.named_parameters()}
    named = grads_of(score, {**values, **params})
    named["net.x"] = named["image"]
    score.backward()
    grads: dict[str, torch.Tensor | None] = {"image": image.grad}
    grads.update({name: value.grad for name, value in params.items()})
    return Oracle("score", named, {"image", "net.conv1.weight", "net.fc.weight", "scores"}, grads)


def plain_multi_output() -> Oracle:
    """Only autograd.grad calls: no `.grad` is ever written (every leaf's grad is null)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.rand(10, 2).requires_grad_(True)
        fc1, fc2 = nn.Linear(2, 10), nn.Linear(10, 3)
    pred = fc2(torch.tanh(fc1(x)))
    for seed in multi_output_seeds(pred):
        torch.autograd.grad(pred, x, seed, retain_graph=True)
    grads: dict[str, torch.Tensor | None] = {"x_temp": x.grad}
    for prefix, layer in (("model.fc1", fc1), ("model.fc2", fc2)):
        grads.update({f"{prefix}.{key}": value.grad for key, value in layer.named_parameters()})
    assert all(value is None for value in grads.values())
    return Oracle("pred", {}, set(), grads, modes=())


def multi_output_seeds(pred: torch.Tensor) -> list[torch.Tensor]:
    """The spec's grad_outputs, in order: ones, then the one-hot columns 0, 1, 2."""
    seeds = [torch.ones_like(pred)]
    for column in range(3):
        seed = torch.zeros_like(pred)
        seed[:, column] = 1.0
        seeds.append(seed)
    return seeds


ORACLES: dict[str, Callable[[], Oracle]] = {
    "two_modules.yaml": lambda: plain_two_modules()[0],
    "matrix_chain.yaml": plain_matrix_chain,
    "vector_backward.yaml": plain_vector_backward,
    "add_hooks.yaml": plain_add_hooks,
    "mul_param.yaml": plain_mul_param,
    "embedding.yaml": plain_embedding,
    "cnn_hooks.yaml": plain_cnn_hooks,
    "multi_output.yaml": plain_multi_output,
}


def expected_in_layout(expected: torch.Tensor, layout: str, shape: list[int]) -> torch.Tensor:
    """Torch's gradient put in the layout a label states."""
    if layout == "transposed":
        return expected.transpose(-2, -1) if expected.dim() >= 2 else expected
    if layout == "reshaped":
        return expected.reshape(shape)
    if layout == "summed":
        return expected.sum_to_size(shape) if shape else expected.sum()
    return expected


def label_mismatches(walk_: Walk, oracle: Oracle, mode: str) -> tuple[list[str], set[str]]:
    """Every labelled gradient of `oracle.of` whose wrt torch knows, compared in its layout
    (one-use contributions, whose text says "only", and modified values are left out); also the
    names that were compared."""
    problems: list[str] = []
    seen: set[str] = set()
    for event in walk_.events(mode):
        if event["phase"] != "backward" or event["hook"] == "post_accumulate_grad":
            continue
        for item in event["args"]:
            meaning = item.get("meaning")
            if (meaning is None or meaning.get("of") != oracle.of
                    or meaning.get("wrt") not in oracle.named
                    or "only" in str(meaning.get("text", "")) or meaning.get("modified")):
                continue
            if item.get("value") is None:
                continue  # a summary: nothing to compare value by value
            wrt = meaning["wrt"]
            want = expected_in_layout(oracle.named[wrt].detach().double(),
                                      str(meaning.get("layout")), item["shape"])
            got = value_tensor(item)
            seen.add(wrt)
            if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
                problems.append(f"[{mode}] {describe(event)} {item['name']} = ∂{oracle.of}/∂{wrt} "
                                f"({meaning.get('layout')}): got {got.tolist()}, torch says "
                                f"{want.tolist()}")
    return problems, seen


# --- every spec --------------------------------------------------------------------------------


def test_there_are_specs_and_oracles_for_the_acceptance_ones() -> None:
    names = {path.name for path in SPEC_FILES}
    assert {"two_modules.yaml", "matrix_chain.yaml", "vector_backward.yaml"} <= names
    assert set(ORACLES) <= names


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda path: path.stem)
def test_every_spec_walks_with_every_check_verified(
        walks: dict[str, Walk | AssertionError], path: Path) -> None:
    walk_ = get(walks, spec_key(path))
    assert walk_.doc.get("schema") == SCHEMA
    assert walk_.doc.get("torch") == torch.__version__
    assert str(walk_.doc.get("spec", "")).endswith(path.name)
    assert [item.get("mode") for item in walk_.passes()] == list(MODES)
    problems = contract_problems(walk_.doc)
    assert problems == [], "\n".join(problems[:40])
    assert walk_.code == 0, f"exit {walk_.code} with every check verified\n{walk_.stderr[-2000:]}"
    for mode in MODES:
        events = walk_.events(mode)
        assert events, f"[{mode}] no events"
        assert [event["seq"] for event in events] == sorted(event["seq"] for event in events)
        assert len({event["seq"] for event in events}) == len(events)
        assert any(event["phase"] == "backward" for event in events)
        checked = [item for event in events for item in event["args"]
                   if item.get("check") is not None]
        assert checked, f"[{mode}] not a single checked argument"
    # Legacy and full module hooks never share a pass.
    assert not walk_.events("legacy", "full_backward") and not walk_.events(
        "legacy", "full_backward_pre")
    assert not walk_.events("full", "backward")


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_grads_match_plain_torch(walks: dict[str, Walk | AssertionError], name: str) -> None:
    oracle = ORACLES[name]()
    walk_ = get(walks, f"specs/{name}")
    if not oracle.grads_checked:
        assert_grads(walk_, oracle.grads)
        return
    for mode, names in oracle.grads_checked.items():
        assert_grads(walk_, oracle.grads, modes=(mode,), names=names)


@pytest.mark.parametrize("name", sorted(set(ORACLES) - {"multi_output.yaml"}))
def test_labelled_gradients_match_plain_torch(walks: dict[str, Walk | AssertionError],
                                              name: str) -> None:
    oracle = ORACLES[name]()
    walk_ = get(walks, f"specs/{name}")
    for mode in oracle.modes:
        problems, seen = label_mismatches(walk_, oracle, mode)
        assert problems == [], "\n".join(problems[:30])
        missing = oracle.must_see - seen
        assert not missing, f"[{mode}] no argument is labelled ∂{oracle.of}/∂ {sorted(missing)}"


# --- two_modules: the acceptance numbers of issue 3 ----------------------------------------------


@pytest.fixture(scope="module")
def two(walks: dict[str, Walk | AssertionError]) -> Walk:
    return get(walks, "specs/two_modules.yaml")


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


# --- matrix_chain, vector_backward, multi_output -------------------------------------------------


def test_matrix_chain_grads_are_the_articles(walks: dict[str, Walk | AssertionError]) -> None:
    walk_ = get(walks, "specs/matrix_chain.yaml")
    for mode in MODES:
        grads = walk_.grads(mode)
        assert grads["w_1"] == [[6.0, 12.0], [5.0, 10.0]]
        assert grads["w_2"] == [[5.0, 11.0], [5.0, 11.0]]
        assert grads["inp"] is None


def test_matrix_chain_top_level_legacy_hook_sits_on_the_sum(
        walks: dict[str, Walk | AssertionError]) -> None:
    walk_ = get(walks, "specs/matrix_chain.yaml")
    oracle = plain_matrix_chain()
    event = walk_.event("legacy", "backward", "")
    assert event["node"] == "SumBackward0"
    (item,) = args_named(event, "grad_input")
    assert_grad_arg(item, oracle.named["y_2"], of="output", wrt="y_2")
    mv = walk_.events("legacy", "node", node="MvBackward0")
    assert len(mv) == 2
    firsts = {arg(event, "grad_inputs[0]")["meaning"]["wrt"] for event in mv}
    assert firsts == {"w_1", "w_2"}


def test_matrix_chain_full_top_level_hook_has_zeros_for_inp(
        walks: dict[str, Walk | AssertionError]) -> None:
    """The top-level model takes the spec's inputs (inp, w_1, w_2); inp does not require grad,
    so its full-hook entry is a zeros tensor that still names inp (torch-hook-facts B06)."""
    walk_ = get(walks, "specs/matrix_chain.yaml")
    oracle = plain_matrix_chain()
    event = walk_.event("full", "full_backward", "")
    grad_inp, grad_w1, grad_w2 = args_named(event, "grad_input")
    assert_value(grad_inp, torch.zeros(2), describe(event))
    assert_meaning(grad_inp, of="output", wrt="inp", what=describe(event))
    assert_verified(grad_inp, describe(event))
    assert_grad_arg(grad_w1, oracle.named["w_1"], of="output", wrt="w_1", what=describe(event))
    assert_grad_arg(grad_w2, oracle.named["w_2"], of="output", wrt="w_2", what=describe(event))


def test_vector_backward_accumulates_twice(walks: dict[str, Walk | AssertionError]) -> None:
    walk_ = get(walks, "specs/vector_backward.yaml")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(2).requires_grad_(True)
    seen: list[torch.Tensor] = []
    x.register_post_accumulate_grad_hook(lambda leaf: seen.append(leaf.grad.clone()))
    y = x * 3
    for _ in range(2):
        y.backward(torch.tensor([100.0, 0.1]), retain_graph=True)
    assert torch.allclose(seen[-1], torch.tensor([600.0, 0.6]))
    for mode in MODES:
        posts = walk_.events(mode, "post_accumulate_grad", "x")
        assert len(posts) == len(seen) == 2
        for event, want in zip(posts, seen, strict=True):
            assert_value(arg(event, "tensor"), want, f"[{mode}] {describe(event)}")
        hooks = walk_.events(mode, "tensor", "x")
        assert len(hooks) == 2
        for event in hooks:
            assert_grad_arg(arg(event, "grad"), torch.tensor([300.0, 0.3]), of="y", wrt="x")


def test_multi_output_grad_calls_reach_x_temp_in_order(
        walks: dict[str, Walk | AssertionError]) -> None:
    walk_ = get(walks, "specs/multi_output.yaml")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.rand(10, 2).requires_grad_(True)
        fc1, fc2 = nn.Linear(2, 10), nn.Linear(10, 3)
    pred = fc2(torch.tanh(fc1(x)))
    wanted = [torch.autograd.grad(pred, x, seed, retain_graph=True)[0]
              for seed in multi_output_seeds(pred)]
    for mode in MODES:
        events = walk_.events(mode, "tensor", "x_temp")
        assert len(events) == len(wanted), f"[{mode}] {len(events)} tensor hook calls on x_temp"
        for event, want in zip(events, wanted, strict=True):
            assert_grad_arg(arg(event, "grad"), want, of="pred", wrt="x_temp",
                            what=f"[{mode}] {describe(event)}")
        assert not walk_.events(mode, "post_accumulate_grad")

