"""Spec language features beyond the eight examples, each against plain PyTorch: modules nested to
depth, a module called twice, several return values, shorthands, and checks on modules the forward
never calls."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradexplain.capture.build import build
from gradexplain.errors import SpecNameError, SpecShapeError
from gradexplain.language import load_spec_text
from tests.helpers.capture import run_forward
from tests.helpers.spectexts import NESTED


def test_modules_nest_to_any_depth() -> None:
    spec = load_spec_text(NESTED)
    built = build(spec)
    output, values = run_forward(built)
    torch.autograd.backward(output)
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    a = torch.tensor([2.0, 2.0, 2.0], requires_grad=True)
    b = torch.tensor([0.5, 0.5, 0.5], requires_grad=True)
    v = torch.tanh(x * b)
    y = v * a
    torch.autograd.backward(y.sum())
    torch.testing.assert_close(values["outer.middle.inner.v"], v)
    torch.testing.assert_close(values["y"], y)
    leaves = built.leaves()
    for name, plain in (("x", x), ("outer.a", a), ("outer.middle.b", b)):
        torch.testing.assert_close(leaves[name].grad, plain.grad)
    assert [name for name, _ in built.model.named_modules()] == [
        "", "outer", "outer.middle", "outer.middle.inner", "outer.middle.inner.act"]


def test_a_module_called_twice_shares_its_weights() -> None:
    spec = load_spec_text("""
inputs:
  x: {value: [[1.0, 2.0]], requires_grad: true}
modules:
  block:
    layers:
      l: {Linear: {in_features: 2, out_features: 2}, weight: [[1.0, -1.0], [0.5, 2.0]],
          bias: [0.1, -0.1]}
    forward: {args: [h], steps: ["o = relu(l(h))"]}
forward: ["y1 = block(x)", "y2 = block(y1)", "s = sum(y2)"]
backward: s
""")
    built = build(spec)
    output, values = run_forward(built)
    torch.autograd.backward(output)
    layer = nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, -1.0], [0.5, 2.0]]))
        layer.bias.copy_(torch.tensor([0.1, -0.1]))
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    y2 = torch.relu(layer(torch.relu(layer(x))))
    torch.autograd.backward(y2.sum())
    torch.testing.assert_close(values["y2"], y2)
    leaves = built.leaves()
    torch.testing.assert_close(leaves["block.l.weight"].grad, layer.weight.grad)
    torch.testing.assert_close(leaves["x"].grad, x.grad)


def test_a_module_returns_several_tensors() -> None:
    spec = load_spec_text("""
inputs:
  x: {value: [1.0, 2.0, 3.0, 4.0], requires_grad: true}
modules:
  split:
    forward:
      args: [h]
      steps: ["a, b = chunk(h, 2)", "c = exp(b)"]
      returns: [a, c]
forward: ["p, q = split(x)", "s = sum(p * 2) + sum(q)"]
backward: s
""")
    assert spec.tensor("p") is not None and spec.tensor("p").shape == (2,)  # type: ignore[union-attr]
    output, values = run_forward(build(spec))
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    a, b = torch.chunk(x, 2)
    torch.testing.assert_close(values["p"], a)
    torch.testing.assert_close(values["q"], torch.exp(b))
    torch.testing.assert_close(output, (a * 2).sum() + torch.exp(b).sum())
    assert values["p"].grad_fn.name() == "SplitBackward0"


def test_shorthands_mean_the_long_forms() -> None:
    short = load_spec_text("inputs:\n  x: [1.0, 2.0]\nparams:\n  w: [3.0, 4.0]\n"
                           "layers:\n  act: Sigmoid\nforward: ['y = act(x * w)', 's = sum(y)']\n"
                           "backward: s\n")
    long = load_spec_text("inputs:\n  x: {value: [1.0, 2.0], requires_grad: false}\n"
                          "params:\n  w: {value: [3.0, 4.0]}\nlayers:\n  act: {Sigmoid: {}}\n"
                          "forward: {steps: ['y = act(x * w)', 's = sum(y)'], returns: s}\n"
                          "backward: {of: s}\n")
    assert short.inputs == long.inputs
    assert short.root.params == long.root.params
    assert short.root.layers == long.root.layers
    assert short.root.steps == long.root.steps
    expected = torch.sigmoid(torch.tensor([1.0, 2.0]) * torch.tensor([3.0, 4.0])).sum()
    torch.testing.assert_close(run_forward(build(short))[0], expected)


def test_a_module_never_called_is_still_checked_for_names() -> None:
    with pytest.raises(SpecNameError, match="unknown name 'nope'"):
        load_spec_text("inputs:\n  x: {value: 1.0, requires_grad: true}\n"
                       "modules:\n  unused:\n    forward: {args: [h], steps: ['o = h * nope']}\n"
                       "forward: ['y = x * 2']\nbackward: y\n")


def test_returns_must_name_a_defined_tensor() -> None:
    with pytest.raises(SpecNameError, match=r"returns names 'oo'.*did you mean 'o'"):
        load_spec_text("inputs:\n  x: {value: 1.0, requires_grad: true}\n"
                       "modules:\n  m:\n    forward: {args: [h], steps: ['o = h * 2'], "
                       "returns: oo}\n"
                       "forward: ['y = m(x)']\nbackward: y\n")


def test_module_argument_count_is_checked() -> None:
    with pytest.raises(SpecShapeError, match=r"takes 2 argument\(s\) \(a, b\), got 1"):
        load_spec_text("inputs:\n  x: {value: 1.0, requires_grad: true}\n"
                       "modules:\n  m:\n    forward: {args: [a, b], steps: ['o = a * b']}\n"
                       "forward: ['y = m(x)']\nbackward: y\n")


def test_a_module_called_by_keyword_is_told_to_pass_by_position() -> None:
    """`m(a=x)` once read "takes 1 argument(s) (a), got 1"."""
    with pytest.raises(SpecShapeError, match=r"takes its arguments by position \(a\), not by "
                                             r"keyword \(a=\)"):
        load_spec_text("inputs:\n  x: {value: 1.0, requires_grad: true}\n"
                       "modules:\n  m:\n    forward: {args: [a], steps: ['o = a * 2']}\n"
                       "forward: ['y = m(a=x)']\nbackward: y\n")


def test_whole_number_tensors_are_only_indices() -> None:
    with pytest.raises(SpecShapeError, match=r"\* needs floating-point tensors"):
        load_spec_text("inputs:\n  idx: {value: [1, 2], dtype: int64}\n"
                       "  x: {value: [1.0, 2.0], requires_grad: true}\n"
                       "forward: ['y = x * idx', 's = sum(y)']\nbackward: s\n")
    with pytest.raises(SpecShapeError, match="Sigmoid needs a floating-point input"):
        load_spec_text("inputs:\n  idx: {value: [1, 2], dtype: int64}\n"
                       "  x: {value: [1.0, 2.0], requires_grad: true}\n"
                       "layers:\n  act: Sigmoid\n"
                       "forward: ['y = act(idx)', 's = sum(x)']\nbackward: s\n")
