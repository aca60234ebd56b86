"""One naming rule: every distinct tensor of a walk has its own name, and one tensor has one name,
in the labels of both passes and the chain rule alike (records.names.Naming, GraphView's
synthetic names, the chain rule's ChainNames).

Torch is the oracle: each model is redone here in plain PyTorch, and a name is trusted only where
the value gradexplain shows under it is the gradient torch computes for the tensor the name should
denote (three weights of different layers, the same op at five time steps, a module's two calls).
`tests/helpers/naming.py` checks uniqueness by graph place, and is applied to every spec in specs/
and every model of examples/models.py.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from gradexplain.api import explain
from gradexplain.records.session import Session
from gradexplain.records.walk import DerivationLine, Walk
from tests.helpers.capture import capture_text, captured
from tests.helpers.cli import SPECS
from tests.helpers.naming import assert_names_unique, walk_uses

# --- three layers, each with a `weight` --------------------------------------------------------

LAYERS = """
name: three_weights
seed: 0
inputs:
  image: {randn: [1, 1, 6, 6], requires_grad: true}
modules:
  net:
    layers:
      conv1: {Conv2d: {in_channels: 1, out_channels: 2, kernel_size: 3, padding: 1}}
      conv2: {Conv2d: {in_channels: 2, out_channels: 3, kernel_size: 3}}
      flat: Flatten
      fc: {Linear: {in_features: 48, out_features: 2}}
    forward:
      args: [x]
      steps: ["a = conv1(x)", "b = conv2(a)", "f = flat(b)", "scores = fc(f)"]
forward: ["scores = net(image)", "score = sum(scores * scores)"]
backward: score
"""


def plain_layers() -> dict[str, torch.Tensor]:
    """The spec in plain torch (seed, then the input, then the layers in spec order): the
    gradient of `score` with respect to each layer's weight and bias."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        image = torch.randn(1, 1, 6, 6, requires_grad=True)
        conv1 = nn.Conv2d(1, 2, kernel_size=3, padding=1)
        conv2 = nn.Conv2d(2, 3, kernel_size=3)
        fc = nn.Linear(48, 2)
    scores = fc(torch.flatten(conv2(conv1(image)), 1))
    (scores * scores).sum().backward()
    return {f"{name}.{kind}": getattr(layer, kind).grad
            for name, layer in (("conv1", conv1), ("conv2", conv2), ("fc", fc))
            for kind in ("weight", "bias")}


@pytest.fixture(scope="module")
def layers() -> Session:
    return capture_text(LAYERS, "three_weights.yaml")


def test_three_weights_are_told_apart_in_every_label(layers: Session) -> None:
    walk = layers.walk
    expected = plain_layers()
    seen: dict[str, int] = {}
    for walk_pass in walk.passes:
        for event in walk_pass.events:
            for arg in event.args:
                if arg.meaning is None:
                    continue
                shown = walk.naming.short(arg.meaning.wrt)
                assert not re.search(r"∂(weight|bias)\b", arg.meaning.text), arg.meaning.text
                if shown in expected and arg.meaning.layout == "as-is" \
                        and not arg.meaning.partial and arg.value is not None:
                    # The name is trusted only because the value is that layer's gradient.
                    torch.testing.assert_close(torch.tensor(arg.value.value), expected[shown])
                    assert f"∂score/∂{shown}" in arg.meaning.text
                    seen[shown] = seen.get(shown, 0) + 1
    assert set(seen) == set(expected), seen
    assert walk.failures() == []


def test_three_weights_are_told_apart_in_the_chain_rule(layers: Session) -> None:
    walk = layers.walk
    expected = plain_layers()
    accumulated = {walk.naming.short(line.output): line for derivation in walk.derivations
                   for line in derivation.lines if line.node.endswith("AccumulateGrad")}
    assert set(expected) <= set(accumulated), sorted(accumulated)
    for name, line in accumulated.items():
        if name in expected:
            assert line.upstream is not None and line.upstream.value is not None
            torch.testing.assert_close(torch.tensor(line.upstream.value), expected[name])
    assert_names_unique(layers)


def test_a_unique_name_stays_short(layers: Session) -> None:
    """Qualified only as much as needed: `a`, `f` and `scores` are the only ones of their name."""
    shown = set(walk_uses(layers).places)
    assert {"a", "f", "scores", "image"} <= shown
    assert not {"net.a", "net.f", "weight", "bias"} & shown


# --- an RNN cell looped over five time steps ------------------------------------------------


class Cell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(3, 4)
        self.rec = nn.Linear(4, 4, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.inp(x) + self.rec(h))


class Loop(nn.Module):
    """Each step's output is `out(h) * 0.5`: an unnamed product per time step, all computed
    into the same named output; the steps are weighted so each has its own gradient."""

    weights: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.cell = Cell()
        self.out = nn.Linear(4, 1)
        self.register_buffer("weights", torch.arange(1.0, 6.0).reshape(5, 1, 1))

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(xs.shape[1], 4)
        steps = []
        for t in range(xs.shape[0]):
            h = self.cell(xs[t], h)
            steps.append(self.out(h) * 0.5)
        return (torch.stack(steps) * self.weights).sum(0)


def make_loop() -> Loop:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Loop()


STEPS_INPUT = torch.linspace(-1.0, 1.0, 5 * 2 * 3).reshape(5, 2, 3)


@pytest.fixture(scope="module")
def loop() -> Session:
    return explain(make_loop(), STEPS_INPUT).session


def plain_step_products() -> list[torch.Tensor]:
    """The gradient of the loss (sum of the output) at each step's `out(h) * 0.5`."""
    model = make_loop()
    h = torch.zeros(2, 4)
    products = []
    for t in range(5):
        h = model.cell(STEPS_INPUT[t], h)
        product = model.out(h) * 0.5
        product.retain_grad()
        products.append(product)
    (torch.stack(products) * model.weights).sum(0).sum().backward()
    return [product.grad for product in products if product.grad is not None]


def test_time_steps_get_their_own_names(loop: Session) -> None:
    assert_names_unique(loop)
    assert loop.walk.failures() == []


def _products(walk: Walk) -> dict[str, DerivationLine]:
    """The chain rule's lines of the per-step products (a [2, 1] output each; the weighting
    of the stacked steps is the other MulBackward0)."""
    return {line.output: line for derivation in walk.derivations for line in derivation.lines
            if line.node == "MulBackward0" and line.upstream is not None
            and line.upstream.shape == (2, 1)}


def test_time_step_suffixes_follow_the_forward(loop: Session) -> None:
    """`output:mul` is step 1's product, `output:mul@k` step k's: each name's gradient is
    the one torch gives that step's product (the weights make every step's differ)."""
    products = _products(loop.walk)
    expected = plain_step_products()
    assert len(products) == len(expected) == 5
    names = sorted(products, key=lambda name: int(name.rpartition("@")[2] or 1)
                   if "@" in name else 1)
    assert names[0] == "output:mul" and names[1:] == [f"output:mul@{k}" for k in range(2, 6)]
    for name, grad in zip(names, expected, strict=True):
        upstream = products[name].upstream
        assert upstream is not None and upstream.value is not None
        torch.testing.assert_close(torch.tensor(upstream.value), grad)


def test_labels_name_each_step_as_the_chain_rule_does(loop: Session) -> None:
    """Every step's product is labelled somewhere (its Node hooks) under the chain rule's name,
    with torch's value for that step."""
    walk = loop.walk
    expected = dict(zip(sorted(_products(walk), key=lambda name: (len(name), name)),
                        plain_step_products(), strict=True))
    labelled: dict[str, int] = {}
    for walk_pass in walk.passes:
        for event in walk_pass.events:
            if event.hook != "node_pre" or event.node != "MulBackward0":
                continue
            for arg in event.args:
                if arg.meaning is not None and arg.meaning.wrt in expected:
                    assert arg.value is not None
                    torch.testing.assert_close(torch.tensor(arg.value.value),
                                               expected[arg.meaning.wrt])
                    labelled[arg.meaning.wrt] = labelled.get(arg.meaning.wrt, 0) + 1
    assert set(labelled) == set(expected)


# --- one tensor, one name ---------------------------------------------------------------------

PRODUCT = """
name: product
seed: 0
inputs:
  x: {randn: [3]}
modules:
  m:
    params: {p: [0.5, -1.0, 2.0]}
    forward: {args: [x], steps: ["z = sum(tanh(p * x))"]}
forward: ["z = m(x)"]
backward: z
"""


def test_an_unnamed_product_has_one_name_in_labels_and_chain_rule() -> None:
    session = capture_text(PRODUCT, "product.yaml")
    walk = session.walk
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(3)
    product = torch.tensor([0.5, -1.0, 2.0], requires_grad=True) * x
    (grad,) = torch.autograd.grad(torch.tanh(product).sum(), product)
    lines = [line for derivation in walk.derivations for line in derivation.lines
             if line.node == "MulBackward0"]
    assert len(lines) == 1 and lines[0].upstream is not None
    name = lines[0].output
    torch.testing.assert_close(torch.tensor(lines[0].upstream.value), grad)
    labels = [arg for walk_pass in walk.passes for event in walk_pass.events
              if event.hook == "node_pre" and event.node == "MulBackward0"
              for arg in event.args if arg.meaning is not None]
    assert len(labels) == 2  # one per pass
    for arg in labels:
        assert arg.meaning is not None and arg.value is not None
        assert arg.meaning.wrt == name
        torch.testing.assert_close(torch.tensor(arg.value.value), grad)
    assert_names_unique(session)


# --- a module called twice --------------------------------------------------------------------

TWICE = """
name: twice
seed: 0
inputs:
  x: {randn: [3], requires_grad: true}
modules:
  m:
    params: {p: [0.5, -1.0, 2.0]}
    forward: {args: [u], steps: ["y = tanh(p * u)"]}
forward: ["a = m(x)", "b = m(a)", "z = sum(b * a)"]
backward: z
"""


def test_a_module_called_twice_names_each_call() -> None:
    session = capture_text(TWICE, "twice.yaml")
    walk = session.walk
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(3, requires_grad=True)
    p = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    a = torch.tanh(p * x)
    b = torch.tanh(p * a)
    first, second = torch.autograd.grad((b * a).sum(), [a, b])
    # The tensor hooks see each call's whole gradient: the first call's output is `a`
    # (also m.y), the second's `b` (also m.y@2).
    hooked = {(event.target, walk_pass.mode): event.args[0] for walk_pass in walk.passes
              for event in walk_pass.events if event.hook == "tensor"}
    for mode in ("legacy", "full"):
        for target, expected in (("a", first), ("b", second)):
            item = hooked[(target, mode)]
            assert item.value is not None and item.meaning is not None
            torch.testing.assert_close(torch.tensor(item.value.value), expected)
            assert item.check is not None and item.check.verified
    aliases = {arg.meaning.wrt: set(arg.meaning.aliases) for walk_pass in walk.passes
               for event in walk_pass.events for arg in event.args if arg.meaning is not None}
    assert "m.y" in aliases["a"] and "m.y@2" in aliases["b"]
    assert_names_unique(session)


# --- every spec and every example model -------------------------------------------------------


@pytest.mark.parametrize("spec", sorted(path.name for path in SPECS.glob("*.yaml")))
def test_every_spec_names_each_tensor_once(spec: str) -> None:
    session = captured(spec)
    uses = walk_uses(session)
    assert uses.places, "nothing labelled"
    assert_names_unique(session)


EXAMPLES = {"make_mlp": (4, 3), "make_cnn": (2, 1, 8, 8), "make_deep": (2, 256)}
EXAMPLE_FILE = Path(__file__).resolve().parents[2] / "examples" / "models.py"


def example_model(factory: str) -> nn.Module:
    """A model of examples/models.py, loaded as a file (the folder is no package)."""
    found = importlib.util.spec_from_file_location("example_models", EXAMPLE_FILE)
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model: nn.Module = getattr(module, factory)()
    return model


@pytest.mark.parametrize("factory", sorted(EXAMPLES))
def test_every_example_model_names_each_tensor_once(factory: str) -> None:
    session = explain(example_model(factory), EXAMPLES[factory]).session
    assert walk_uses(session).places
    assert_names_unique(session)
