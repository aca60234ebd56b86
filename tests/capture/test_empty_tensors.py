"""Tensors with no elements walk like any other: a batch of 0 through Linear and Conv2d, an
Embedding looking up no indices, a matmul whose inner size is 0 (a non-empty result from empty
operands), against plain PyTorch written here.

The recorded value of an empty tensor is `[]` or `[[], []]`, which alone does not say its shape:
rebuilt without its recorded shape, every check of a (0, 2) gradient failed against torch's own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.helpers.walkjson import MODES, Walk, contract_problems, get, run_all

Grads = dict[str, torch.Tensor | None]


def plain_inner_zero() -> Grads:
    x = torch.zeros(2, 0, requires_grad=True)
    w = nn.Parameter(torch.zeros(0, 3))
    b = nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    y = x @ w + b
    (y * y).sum().backward()
    return {"x": x.grad, "w": w.grad, "b": b.grad}


def plain_linear() -> Grads:
    x = torch.zeros(0, 3, requires_grad=True)
    layer = nn.Linear(3, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]]))
        layer.bias.copy_(torch.tensor([0.5, -0.5]))
    torch.tanh(layer(x)).sum().backward()
    return {"x": x.grad, "l.weight": layer.weight.grad, "l.bias": layer.bias.grad}


def plain_conv() -> Grads:
    x = torch.zeros(0, 1, 4, 4, requires_grad=True)
    conv = nn.Conv2d(1, 2, 3)
    conv(x).sum().backward()
    assert conv.bias is not None
    # An empty batch adds nothing to any weight's gradient, whatever the weights are.
    return {"x": x.grad, "conv.weight": conv.weight.grad, "conv.bias": conv.bias.grad}


def plain_embedding() -> Grads:
    table = nn.Embedding(5, 2)
    table(torch.zeros(0, dtype=torch.int64)).sum().backward()
    return {"idx": None, "e.weight": table.weight.grad}  # indices have no gradient


CASES: dict[str, tuple[str, Callable[[], Grads]]] = {
    "inner_zero": ("""
inputs:
  x: {zeros: [2, 0], requires_grad: true}
params: {w: {zeros: [0, 3]}, b: [1.0, 2.0, 3.0]}
forward: ["y = x @ w + b", "z = sum(y * y)"]
backward: z
""", plain_inner_zero),
    "linear": ("""
inputs:
  x: {zeros: [0, 3], requires_grad: true}
layers:
  l: {Linear: {in_features: 3, out_features: 2}, weight: [[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]],
      bias: [0.5, -0.5]}
forward: ["y = l(x)", "t = tanh(y)", "z = sum(t)"]
backward: z
""", plain_linear),
    "conv": ("""
inputs:
  x: {zeros: [0, 1, 4, 4], requires_grad: true}
layers:
  conv: {Conv2d: {in_channels: 1, out_channels: 2, kernel_size: 3}}
forward: ["c = conv(x)", "z = sum(c)"]
backward: z
""", plain_conv),
    "embedding": ("""
inputs:
  idx: {zeros: [0], dtype: int64}
layers:
  e: {Embedding: {num_embeddings: 5, embedding_dim: 2}}
forward: ["z = sum(e(idx))"]
backward: z
""", plain_embedding),
}


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Walk | AssertionError]:
    folder = tmp_path_factory.mktemp("empty")
    paths: list[Path] = []
    for name, (text, _) in CASES.items():
        path = folder / f"{name}.yaml"
        path.write_text(f"name: {name}\n{text.lstrip()}", encoding="utf-8")
        paths.append(path)
    return {name: result for name, result in zip(CASES, run_all(paths).values(), strict=True)}


@pytest.mark.parametrize("name", CASES)
def test_an_empty_tensor_walks_with_every_check_verified(
        walks: dict[str, Walk | AssertionError], name: str) -> None:
    walked = get(walks, name)
    assert walked.code == 0, walked.stderr[-2000:]
    assert contract_problems(walked.doc) == []
    checks = [item["check"] for mode in MODES for event in walked.events(mode)
              for item in event["args"] if item.get("check") is not None]
    assert checks and all(check["verified"] for check in checks)


@pytest.mark.parametrize("name", CASES)
def test_the_leaves_gradients_are_torchs(walks: dict[str, Walk | AssertionError],
                                         name: str) -> None:
    walked = get(walks, name)
    expected = CASES[name][1]()
    for mode in MODES:
        grads = walked.grads(mode)
        assert set(grads) == set(expected), (mode, sorted(grads))
        for leaf, want in expected.items():
            if want is None:
                assert grads[leaf] is None, (mode, leaf, grads[leaf])
                continue
            got = torch.tensor(grads[leaf], dtype=torch.float64)
            # The nested lists of an empty gradient have no shape of their own: compare the
            # elements, and the shape where the tensor hook recorded it.
            assert got.numel() == want.numel(), (mode, leaf, grads[leaf], list(want.shape))
            torch.testing.assert_close(got.flatten(), want.double().flatten())
        hooked = [event for event in walked.events(mode, "tensor")
                  if expected.get(event["target"]) is not None]
        assert hooked, mode
        for event in hooked:
            want = expected[event["target"]]
            assert want is not None and event["args"][0]["shape"] == list(want.shape)


GRAD_OF_EMPTY_BATCH = """
name: grad_of_empty_batch
inputs:
  x: {rand: [0, 2], requires_grad: true}
layers:
  fc: {Linear: {in_features: 2, out_features: 3}}
forward: ["pred = fc(x)"]
grad:
  - {of: pred, wrt: x, grad_outputs: ones}
"""


def test_autograd_grad_over_an_empty_batch(tmp_path: Path) -> None:
    """The vector-Jacobian lesson of a batch of no samples has no per-sample Jacobian to show
    (it divided by the batch size before, an internal error)."""
    path = tmp_path / "grad_of_empty_batch.yaml"
    path.write_text(GRAD_OF_EMPTY_BATCH, encoding="utf-8")
    walked = get(run_all([path]), str(path))
    assert walked.code == 0, walked.stderr[-2000:]
    assert contract_problems(walked.doc) == []
    checks = [item["check"] for mode in MODES for event in walked.events(mode)
              for item in event["args"] if item.get("check") is not None]
    assert checks and all(check["verified"] for check in checks)
    x = torch.rand(0, 2, requires_grad=True)
    layer = nn.Linear(2, 3)
    pred = layer(x)
    (expected,) = torch.autograd.grad(pred, x, torch.ones_like(pred))
    hooked = [event for mode in MODES for event in walked.events(mode, "tensor")
              if event["target"] == "x"]
    assert hooked and all(event["args"][0]["shape"] == list(expected.shape)
                          for event in hooked)
