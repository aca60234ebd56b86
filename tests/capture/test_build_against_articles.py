"""Each spec in specs/ against an independent, plain-PyTorch rewrite of its article's example.

For every spec the test writes the article's code (its classes and lines where it has them) with
nothing from gradexplain, then builds the spec with `build` + `run_forward` and compares the named
intermediate values of the forward pass and the gradients after the same backward on both sides.
Where the spec is literal, the published numbers are asserted as literals too.

Random values (randn/rand inputs, torch.nn default layer init) are reproduced by SEEDING, never by
copying the built tensors: `_seeded(seed)` forks the global RNG and calls torch.manual_seed(seed),
then the plain code creates the inputs and the layers in spec order, just as the articles do after
a manual_seed. That the plain leaves come out bit-identical (torch.equal) to the built ones is
itself checked in each test. test_build_determinism.py checks that build() makes the same
tensors every time, for every spec.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import Parameter

from gradexplain.capture.build import Built, build
from gradexplain.language import ModelSpec, load_spec
from tests.helpers.articles import MyModule, MyModule2
from tests.helpers.capture import run_forward

SPECS = Path(__file__).resolve().parent.parent.parent / "specs"


def _load(name: str) -> tuple[ModelSpec, Built]:
    spec = load_spec(SPECS / f"{name}.yaml")
    return spec, build(spec)


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """torch.manual_seed(seed) for the block, leaving the caller's global RNG as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _close(actual: Any, expected: torch.Tensor) -> None:
    assert isinstance(actual, torch.Tensor)
    torch.testing.assert_close(actual, expected)


def _near(actual: torch.Tensor | None, published: list[Any] | float, atol: float = 1e-4) -> None:
    """`actual` equals a published (printed, 4-decimal) number within atol."""
    assert actual is not None
    expected = torch.tensor(published, dtype=actual.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    torch.testing.assert_close(actual, expected, rtol=0.0, atol=atol)


def _grad(tensor: torch.Tensor) -> torch.Tensor:
    assert tensor.grad is not None
    return tensor.grad


# --- two_modules: the register_backward_hook article (MyModule -> MyModule2) ----------------------


def test_two_modules_matches_article_and_published_numbers() -> None:
    module = MyModule()
    module2 = MyModule2()
    x = torch.tensor(5.0, requires_grad=True)
    y = module(x)
    t = module2.l(y)
    z = module2(y)

    _spec, built = _load("two_modules")
    output, values = run_forward(built)
    leaves = built.leaves()

    assert torch.equal(built.input("x"), x.detach())
    assert torch.equal(leaves["module.p"], module.p.detach())
    assert torch.equal(leaves["module2.l.weight"], module2.l.weight.detach())
    for name in ("y", "module.y", "module2.x"):
        assert torch.equal(values[name], torch.tensor([15.0, 20.0])), name
    _close(values["module2.t"], t)
    _close(values["module2.z"], z)
    _close(values["z"], z)
    _close(output, z)
    _near(values["module2.t"], [-1.0990])  # -0.1490 * 15 + 0.0568 * 20
    _near(output, [0.2499])  # the blog printed 0.2502; torch-hook-facts A1 gives 0.2499

    # `self.p * x` records MulBackward0 whose edges are (p, x), in that operand order.
    assert values["module.y"].grad_fn.name() == "MulBackward0"
    first_edge = values["module.y"].grad_fn.next_functions[0][0]
    assert first_edge.variable is leaves["module.p"]
    assert output.grad_fn.name() == "SigmoidBackward0"

    z.backward()
    output.backward()
    _close(_grad(built.input("x")), _grad(x))
    _close(_grad(leaves["module.p"]), _grad(module.p))
    _close(_grad(leaves["module2.l.weight"]), _grad(module2.l.weight))
    _near(built.input("x").grad, -0.0412)
    _near(leaves["module.p"].grad, [-0.1397, 0.0532])
    _near(leaves["module2.l.weight"].grad, [[2.8120, 3.7493]])


# --- matrix_chain: the autograd DAG article -------------------------------------------------------


def test_matrix_chain_matches_article() -> None:
    inp = torch.Tensor([1, 2])
    w_1 = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    w_2 = torch.tensor([[2.0, 3.0], [4.0, 2.0]], requires_grad=True)
    y_1 = w_1 @ inp
    y_2 = w_2 @ y_1
    output = y_2.sum()

    _spec, built = _load("matrix_chain")
    b_output, values = run_forward(built)

    assert torch.equal(built.input("inp"), inp)
    assert not built.input("inp").requires_grad
    assert torch.equal(values["y_1"], y_1)
    assert torch.equal(values["y_2"], y_2)
    assert torch.equal(b_output, output)
    assert torch.equal(values["y_1"], torch.tensor([5.0, 11.0]))
    assert torch.equal(values["y_2"], torch.tensor([43.0, 42.0]))
    assert b_output.item() == 85.0
    assert values["y_1"].grad_fn.name() == "MvBackward0"
    assert values["y_2"].grad_fn.name() == "MvBackward0"
    assert b_output.grad_fn.name() == "SumBackward0"

    torch.autograd.backward(output)  # = output.backward(), typed for mypy
    b_output.backward()
    for name, plain in (("w_1", w_1), ("w_2", w_2)):
        assert torch.equal(_grad(built.input(name)), _grad(plain)), name
    assert torch.equal(_grad(built.input("w_1")), torch.tensor([[6.0, 12.0], [5.0, 10.0]]))
    assert torch.equal(_grad(built.input("w_2")), torch.tensor([[5.0, 11.0], [5.0, 11.0]]))
    assert built.input("inp").grad is None


# --- vector_backward: y = x * 3, y.backward(gradient) twice ---------------------------------------


def test_vector_backward_matches_article_and_accumulates() -> None:
    spec, built = _load("vector_backward")
    # Seeded like build(): manual_seed(spec seed), then the one randn input.
    with _seeded(0):
        x = torch.randn(2, requires_grad=True)
    y = x * 3
    gradients = torch.tensor([100, 0.1], dtype=torch.float)

    b_output, values = run_forward(built)
    bx = built.input("x")
    assert spec.seed == 0
    assert torch.equal(bx, x.detach())
    assert torch.equal(values["y"], y)
    assert torch.equal(b_output, y)
    assert b_output.grad_fn.name() == "MulBackward0"

    # The spec asks for exactly this backward: of y, gradient [100, 0.1], retain_graph, twice.
    (backward,) = spec.backwards
    assert (backward.of, backward.retain_graph, backward.times) == ("y", True, 2)
    assert backward.gradient is not None
    assert backward.gradient.value == [100.0, 0.1]

    torch.autograd.backward(y, gradients, retain_graph=True)  # = y.backward(gradients, ...)
    b_output.backward(gradients, retain_graph=True)
    _close(_grad(bx), _grad(x))
    _near(bx.grad, [300.0, 0.3])
    torch.autograd.backward(y, gradients, retain_graph=True)  # = y.backward(gradients, ...)
    b_output.backward(gradients, retain_graph=True)
    _close(_grad(bx), _grad(x))
    _near(bx.grad, [600.0, 0.6])


# --- add_hooks: the Add module of the hooks article -----------------------------------------------


class Add(nn.Module):
    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        output = torch.add(x1, x2)
        return output


def _record_forward(module: nn.Module, answer: list[torch.Tensor]) -> None:
    """The article's pre_hook (inputs) and hook (output), appending to `answer`."""

    def pre_hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        answer.extend(inputs)

    def hook(_module: nn.Module, _inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        answer.append(output)

    module.register_forward_pre_hook(pre_hook)
    module.register_forward_hook(hook)


def test_add_hooks_matches_article() -> None:
    # Seeded like build(): manual_seed(0), then x1 = rand(1), x2 = rand(1) in spec order.
    with _seeded(0):
        x1 = torch.rand(1, requires_grad=True)
        x2 = torch.rand(1, requires_grad=True)
    add = Add()
    answer: list[torch.Tensor] = []
    _record_forward(add, answer)
    output = add(x1, x2)

    _spec, built = _load("add_hooks")
    b_answer: list[torch.Tensor] = []
    _record_forward(built.model.get_submodule("add"), b_answer)
    b_output, values = run_forward(built)

    assert torch.equal(built.input("x1"), x1.detach())
    assert torch.equal(built.input("x2"), x2.detach())
    assert not torch.equal(x1, x2)
    for name, plain in (("add.x1", x1), ("add.x2", x2), ("add.output", output), ("output", output)):
        assert torch.equal(values[name], plain), name
    assert torch.equal(b_output, output)
    assert b_output.grad_fn.name() == output.grad_fn.name() == "AddBackward0"
    assert len(b_answer) == len(answer) == 3
    for got, want in zip(b_answer, answer, strict=True):
        assert torch.equal(got, want)

    output.backward()
    b_output.backward()
    for name, plain in (("x1", x1), ("x2", x2)):
        assert torch.equal(_grad(built.input(name)), _grad(plain)), name
        assert torch.equal(_grad(built.input(name)), torch.tensor([1.0])), name


# --- mul_param: the Model (x1 * x2 * W) of the hooks article --------------------------------------


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.W = Parameter(torch.Tensor([5]))

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        output = x1 * x2
        output = output * self.W
        return output


def _record_full_backward(module: nn.Module, answer: list[torch.Tensor]) -> None:
    """The article's module_hook: grad_input entries, then grad_output[0]."""

    def module_hook(
        _module: nn.Module, grad_input: tuple[Any, ...], grad_output: tuple[Any, ...]
    ) -> None:
        answer.extend(grad_input)
        answer.append(grad_output[0])

    module.register_full_backward_hook(module_hook)


def test_mul_param_matches_article() -> None:
    # Seeded like build(): manual_seed(0), x1 = rand(1), x2 = rand(1); W = [5] is literal.
    with _seeded(0):
        x1 = torch.rand(1, requires_grad=True)
        x2 = torch.rand(1, requires_grad=True)
    model = Model()
    answer: list[torch.Tensor] = []
    _record_full_backward(model, answer)
    h = x1 * x2
    output = model(x1, x2)

    _spec, built = _load("mul_param")
    b_answer: list[torch.Tensor] = []
    _record_full_backward(built.model.get_submodule("model"), b_answer)
    b_output, values = run_forward(built)
    leaves = built.leaves()

    assert torch.equal(built.input("x1"), x1.detach())
    assert torch.equal(built.input("x2"), x2.detach())
    assert torch.equal(leaves["model.W"], torch.tensor([5.0]))
    _close(values["model.h"], h)
    _close(values["model.output"], output)
    _close(values["output"], output)
    _close(b_output, output)

    output.backward()
    b_output.backward()
    W = leaves["model.W"]
    _close(_grad(built.input("x1")), _grad(x1))
    _close(_grad(built.input("x2")), _grad(x2))
    _close(_grad(W), _grad(model.W))
    # d(x1*x2*W)/dx1 = x2*W, /dx2 = x1*W, /dW = x1*x2
    _close(_grad(built.input("x1")), 5.0 * x2.detach())
    _close(_grad(built.input("x2")), 5.0 * x1.detach())
    _close(_grad(W), (x1 * x2).detach())
    # The full backward hook saw (dL/dx1, dL/dx2) and dL/doutput = 1 on both sides.
    assert len(b_answer) == len(answer) == 3
    for got, want in zip(b_answer, answer, strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(b_answer[2], torch.tensor([1.0]))


# --- multi_output: MLP 2 -> 10 -> 3, autograd.grad with ones and one-hot grad_outputs -------------


class NeuralNetwork(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, 10)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(10, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))  # type: ignore[no-any-return]


def test_multi_output_matches_article() -> None:
    # Seeded like build(): manual_seed(0), x_temp = rand(10, 2), then fc1 and fc2 default init.
    # (The article's x_temp is float64 from numpy; the spec is float32 throughout.)
    with _seeded(0):
        x_temp = torch.rand(10, 2, requires_grad=True)
        model = NeuralNetwork()
    pred = model(x_temp)

    _spec, built = _load("multi_output")
    b_pred, values = run_forward(built)
    leaves = built.leaves()

    assert torch.equal(built.input("x_temp"), x_temp.detach())
    for name, param in model.named_parameters():
        assert torch.equal(leaves[f"model.{name}"], param.detach()), name
    h = model.fc1(x_temp)
    _close(values["model.h"], h)
    _close(values["model.a"], torch.tanh(h))
    _close(values["model.pred"], pred)
    _close(b_pred, pred)
    assert b_pred.shape == (10, 3)

    bx = built.input("x_temp")
    columns = []
    for j in range(3):
        one_hot = torch.zeros((10, 3))
        one_hot[:, j] = 1
        (plain_j,) = torch.autograd.grad(pred, x_temp, one_hot, retain_graph=True)
        (built_j,) = torch.autograd.grad(b_pred, bx, one_hot, retain_graph=True)
        _close(built_j, plain_j)
        columns.append(built_j)
    (plain_ones,) = torch.autograd.grad(pred, x_temp, torch.ones((10, 3)), retain_graph=True)
    (built_ones,) = torch.autograd.grad(b_pred, bx, torch.ones((10, 3)), retain_graph=True)
    (built_sum,) = torch.autograd.grad(b_pred.sum(), bx, retain_graph=True)
    _close(built_ones, plain_ones)
    assert built_ones.shape == (10, 2)
    torch.testing.assert_close(built_ones, columns[0] + columns[1] + columns[2])
    torch.testing.assert_close(built_ones, built_sum)
    assert not torch.allclose(columns[0], columns[1])
    assert bx.grad is None  # autograd.grad does not accumulate into .grad


# --- cnn_hooks: the conv net with a forward hook on conv1 -----------------------------------------


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, kernel_size=3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(kernel_size=2)
        self.conv2 = nn.Conv2d(4, 8, kernel_size=3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(kernel_size=2)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        return self.fc(self.flat(x))  # type: ignore[no-any-return]


def _save_feat(module: nn.Module, store: list[torch.Tensor]) -> None:
    def hook(_module: nn.Module, _inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        store.append(output)

    module.register_forward_hook(hook)


def test_cnn_hooks_matches_plain_net() -> None:
    # Seeded like build(): manual_seed(0), image = randn(1, 3, 8, 8), then conv1, conv2, fc init.
    with _seeded(0):
        image = torch.randn(1, 3, 8, 8, requires_grad=True)
        net = Net()
    feats: list[torch.Tensor] = []
    _save_feat(net.conv1, feats)
    scores = net(image)
    score = scores[0, 3]

    _spec, built = _load("cnn_hooks")
    b_feats: list[torch.Tensor] = []
    _save_feat(built.model.get_submodule("net.conv1"), b_feats)
    b_score, values = run_forward(built)
    leaves = built.leaves()

    assert torch.equal(built.input("image"), image.detach())
    for name, param in net.named_parameters():
        assert torch.equal(leaves[f"net.{name}"], param.detach()), name
    c1 = net.conv1(image)
    p1 = net.pool1(net.relu1(c1))
    c2 = net.conv2(p1)
    p2 = net.pool2(net.relu2(c2))
    _close(values["net.c1"], c1)
    _close(values["net.r1"], torch.relu(c1))
    _close(values["net.p1"], p1)
    _close(values["net.c2"], c2)
    _close(values["net.p2"], p2)
    _close(values["net.f"], p2.flatten(1))
    _close(values["scores"], scores)
    _close(b_score, score)
    assert b_score.shape == ()
    assert len(b_feats) == 1
    assert len(feats) == 2  # the plain net ran conv1 twice (net(image), then conv1 alone)
    _close(b_feats[0], feats[0])
    assert b_feats[0] is values["net.c1"]

    score.backward()
    b_score.backward()
    _close(_grad(built.input("image")), _grad(image))
    for name, param in net.named_parameters():
        _close(_grad(leaves[f"net.{name}"]), _grad(param))
    # Only class 3's row of fc gets a gradient.
    fc_grad = _grad(leaves["net.fc.weight"])
    assert torch.count_nonzero(fc_grad[torch.arange(10) != 3]) == 0
    assert torch.count_nonzero(fc_grad[3]) > 0


# --- embedding: an nn.Embedding; its weight gradient lands in the looked-up rows ------------------


def test_embedding_matches_plain_layer_and_rows() -> None:
    idx = torch.tensor([1, 3, 1])
    c = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    # Seeded like build(): manual_seed(0); the literal inputs draw nothing, then the layer init.
    with _seeded(0):
        emb = nn.Embedding(5, 3)
    e = emb(idx)
    loss = (e * c).sum()

    _spec, built = _load("embedding")
    b_loss, values = run_forward(built)
    weight = built.leaves()["emb.weight"]

    assert built.input("idx").dtype == torch.int64
    assert torch.equal(built.input("idx"), idx)
    assert torch.equal(built.input("c"), c)
    assert torch.equal(weight, emb.weight.detach())
    _close(values["e"], e)
    assert torch.equal(values["e"][0], weight[1])
    assert torch.equal(values["e"][1], weight[3])
    _close(b_loss, loss)

    loss.backward()
    b_loss.backward()
    _close(_grad(weight), _grad(emb.weight))
    expected = torch.zeros(5, 3)
    expected[1] = torch.tensor([8.0, 10.0, 12.0])  # c[0] + c[2]: row 1 looked up twice
    expected[3] = torch.tensor([4.0, 5.0, 6.0])  # c[1]
    assert torch.equal(_grad(weight), expected)
