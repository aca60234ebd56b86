"""Plain-PyTorch oracles for the specs in specs/: what torch says their walks must show.

Each `plain_*` function redoes one spec's example in plain torch from the spec's own numbers
(random inits are redrawn the way DESIGN section 3 says: `torch.manual_seed(seed)`, then the
inputs, params and layers in spec order) and returns an `Oracle`: the gradients of the
differentiated tensor with respect to each tensor a test can name, and every leaf's `.grad`.
`label_mismatches` compares a walk's labelled gradients with one. Used by
tests/capture/test_label_specs_against_torch.py and tests/capture/test_label_two_modules.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from tests.helpers.articles import MyModule, MyModule2
from tests.helpers.walkjson import MODES, Walk, describe, value_tensor


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
