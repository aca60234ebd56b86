"""The text lessons (calls with .grad around them, vector-Jacobian products, interventions,
forward-hook captures) at 100 columns, colour off: no line over the width, no check mark alone
on a line, no matrix row split across lines, continuation lines indented under what they
continue; and the values they print are plain PyTorch's, computed here on models written in
this file with the same weights as the spec text they are given."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from rich.console import Group
from torch import nn

from gradexplain.records.walk import Walk
from gradexplain.render.console import plain_text
from gradexplain.render.lessons import lessons_text
from gradexplain.render.text_walk import walk_text
from tests.helpers.capture import capture_text, captured
from tests.helpers.cli import SPECS
from tests.helpers.printed import assert_printed
from tests.render.test_timeline_text import split_rows

WIDTH = 100
# The lines of a lesson section that may start at column 0: titles and first lines; any other
# line there is a continuation that lost its indent.
STARTS = re.compile(r"(calls, in order|run \d|vector-Jacobian products|\d+ calls? with a seed|"
                    r"(backward|grad) call \d|Interventions: |each intervention runs|\d+\. |"
                    r"Forward-hook captures|register_forward_hook appends|\w+ = forward hook on)")


def tensor_text(values: torch.Tensor) -> str:
    """A tensor as spec YAML (JSON is YAML), full float precision."""
    return json.dumps(values.tolist())


def draw(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator).round(decimals=4)


def lessons_plain(walk: Walk) -> str:
    return plain_text(Group(*lessons_text(walk)), WIDTH)


def assert_laid_out(walk: Walk, rows_everywhere: bool = True) -> None:
    """The rules of the issue, on the whole walk and on the lesson sections alone. Without
    `rows_everywhere`, rows are checked whole in the lessons only: the chain rule's
    `seed gradient v = ...` line (text_pinned.py, not the lessons') still splits a matrix seed."""
    for text in (plain_text(walk_text(walk), WIDTH), lessons_plain(walk)):
        lines = text.splitlines()
        assert [line for line in lines if len(line) > WIDTH] == []
        assert [line for line in lines if line.strip() in ("✓", "✗", "✗ FAILED")] == []
    assert split_rows(lessons_plain(walk).splitlines()) == []
    if rows_everywhere:
        assert split_rows(plain_text(walk_text(walk), WIDTH).splitlines()) == []
    flush = [line for line in lessons_plain(walk).splitlines()
             if line and not line.startswith(" ") and not STARTS.match(line)]
    assert flush == []


def block(lines: list[str], start: Callable[[str], bool], end: Callable[[str], bool]) -> list[str]:
    """The lines from the first that `start` accepts to the first (from there) `end` does."""
    first = next(index for index, line in enumerate(lines) if start(line))
    last = next(index for index in range(first, len(lines)) if end(lines[index]))
    return lines[first:last + 1]


def starts_with(name: str) -> Callable[[str], bool]:
    return lambda line: line.lstrip().startswith(name)


def scaled(factor: float) -> Callable[[nn.Module, Any, Any], tuple[torch.Tensor, ...]]:
    """A full backward hook returning grad_input times `factor`, as the spec's `scale` does."""
    def hook(_module: nn.Module, grad_input: Any, _grad_output: Any) -> tuple[torch.Tensor, ...]:
        return tuple(grad * factor for grad in grad_input)
    return hook


# --- every spec --------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", sorted(path.name for path in SPECS.glob("*.yaml")))
def test_every_spec_fits_100_columns_with_rows_whole(spec: str) -> None:
    assert_laid_out(captured(spec).walk)


def test_the_issue_lines_are_no_longer_split() -> None:
    """column_backward's vᵀJ and the third call's x.grad: each matrix row on one line."""
    text = lessons_plain(captured("column_backward.yaml").walk)
    assert "[-0.034731,\n" not in text and "[-0.034731, -0.0697]]" in text
    lines = text.splitlines()
    x_grad = block(lines[lines.index(next(line for line in lines if line.startswith("run 3"))):],
                   lambda line: line.lstrip().startswith("x.grad"), lambda line: "✓" in line)
    assert len(x_grad) == 4  # one line per row of x, before + added = after side by side


# --- vector-Jacobian products and calls, matrix seeds -----------------------------------------


VJP_CASES = {"x3x4_h5_o3": (3, 4, 5, 3), "x2x6_h4_o2": (2, 6, 4, 2), "x5x3_h6_o4": (5, 3, 6, 4)}


def vjp_case(name: str) -> tuple[str, nn.Sequential, nn.Linear, torch.Tensor, torch.Tensor]:
    """Spec text, the same model in torch, its first layer, its input and the matrix seed v."""
    batch, features, hidden, outputs = VJP_CASES[name]
    generator = torch.Generator().manual_seed(sum(VJP_CASES[name]))
    x, seed = draw(generator, batch, features), draw(generator, batch, outputs)
    fc1, fc2 = nn.Linear(features, hidden), nn.Linear(hidden, outputs)
    with torch.no_grad():
        for layer in (fc1, fc2):
            layer.weight.copy_(draw(generator, *layer.weight.shape))
            layer.bias.copy_(draw(generator, *layer.bias.shape))
    spec = f"""name: {name}
inputs:
  x: {{value: {tensor_text(x)}, requires_grad: true}}
layers:
  fc1: {{Linear: {{in_features: {features}, out_features: {hidden}}},
        weight: {tensor_text(fc1.weight)}, bias: {tensor_text(fc1.bias)}}}
  act: Tanh
  fc2: {{Linear: {{in_features: {hidden}, out_features: {outputs}}},
        weight: {tensor_text(fc2.weight)}, bias: {tensor_text(fc2.bias)}}}
forward: ["h = fc1(x)", "a = act(h)", "pred = fc2(a)"]
backward:
  - {{of: pred, gradient: {tensor_text(seed)}, retain_graph: true}}
  - {{of: pred, gradient: {tensor_text(seed)}}}
"""
    return spec, nn.Sequential(fc1, nn.Tanh(), fc2), fc1, x, seed


def rows_or_stacked(lines: list[str], parts: list[torch.Tensor]) -> None:
    """`before + added = after` as printed: side by side (row i of each on line i) or one
    under the other; either way exactly torch's numbers."""
    numbers = " ".join(lines)
    if len(lines) == parts[0].shape[0] and len(lines) > 1:
        expected = torch.cat([part.reshape(part.shape[0], -1) for part in parts], dim=1)
    else:
        expected = torch.cat([part.flatten() for part in parts])
    assert_printed(numbers.split(".grad", 1)[1], expected.flatten().tolist(), lines[0])


@pytest.mark.parametrize("name", sorted(VJP_CASES))
def test_vjp_and_calls_print_torchs_values_rows_whole(name: str) -> None:
    spec, model, fc1, x, seed = vjp_case(name)
    walk = capture_text(spec, f"test:{name}").walk
    assert_laid_out(walk, rows_everywhere=False)
    leaf = x.clone().requires_grad_(True)
    model(leaf).backward(seed, retain_graph=True)
    assert leaf.grad is not None
    first = leaf.grad.clone()
    assert fc1.weight.grad is not None
    first_weight = fc1.weight.grad.clone()
    # What the first call's J would be, by plain torch: vᵀJ equals it contracted with v.
    jacobian = torch.autograd.functional.jacobian(model, x)
    torch.testing.assert_close(torch.einsum("bo,boxy->xy", seed, jacobian), first)
    lines = lessons_plain(walk).splitlines()
    result = block(lines, lambda line: line.lstrip().startswith("vᵀJ = ["),
                   lambda line: "shape" in line)
    assert_printed(" ".join(result).split("vᵀJ =", 1)[1].split("shape")[0],
                   first.flatten().tolist(), "vᵀJ")
    model(leaf).backward(seed)
    run_2 = lines[lines.index(next(line for line in lines if line.startswith("run 2"))):]
    for grad_name, before, after in (("x.grad", first, leaf.grad),
                                     ("fc1.weight.grad", first_weight, fc1.weight.grad)):
        assert after is not None
        shown = block(run_2, starts_with(grad_name), lambda line: line.endswith("✓"))
        rows_or_stacked([line.removesuffix("✓") for line in shown], [before, after - before, after])


# --- interventions, matrix gradients -----------------------------------------------------------


# (rows, features, factor): rows of 2 numbers, so that both values of a row fit beside each
# other one matrix row per line (wider ones fall back to their summaries).
INTERVENTION_CASES = {"scale_3": (3, 2, 3.0), "scale_half": (4, 2, 0.5), "scale_neg": (5, 2, -2.0)}


@pytest.mark.parametrize("name", sorted(INTERVENTION_CASES))
def test_intervention_prints_torchs_gradients_with_and_without_the_hook(name: str) -> None:
    rows, features, factor = INTERVENTION_CASES[name]
    generator = torch.Generator().manual_seed(rows * features)
    x, weight, second = (draw(generator, rows, features), draw(generator, features, features),
                         draw(generator, 2, features))
    spec = f"""name: {name}
inputs:
  x: {{value: {tensor_text(x)}, requires_grad: true}}
modules:
  module:
    layers:
      l: {{Linear: {{in_features: {features}, out_features: {features}, bias: false}},
          weight: {tensor_text(weight)}}}
    forward: {{args: [x], steps: ["y = l(x)"]}}
  module2:
    layers:
      l: {{Linear: {{in_features: {features}, out_features: 2, bias: false}},
          weight: {tensor_text(second)}}}
      activation: Tanh
    forward: {{args: [y], steps: ["t = l(y)", "u = activation(t)"]}}
forward: ["y = module(x)", "u = module2(y)", "z = sum(u)"]
backward: z
interventions:
  - {{hook: full_backward, on: module2, action: scale, factor: {factor}}}
"""
    walk = capture_text(spec, f"test:{name}").walk
    assert_laid_out(walk)
    first = nn.Linear(features, features, bias=False)
    last = nn.Linear(features, 2, bias=False)
    with torch.no_grad():
        first.weight.copy_(weight)
        last.weight.copy_(second)
    grads: dict[bool, dict[str, torch.Tensor]] = {}
    for hooked in (False, True):
        leaf = x.clone().requires_grad_(True)
        first.weight.grad = None
        inner = nn.Sequential(last, nn.Tanh())
        handle = inner.register_full_backward_hook(scaled(factor)) if hooked else None
        inner(first(leaf)).sum().backward()
        if handle is not None:
            handle.remove()
        assert leaf.grad is not None and first.weight.grad is not None
        grads[hooked] = {"x.grad": leaf.grad, "module.l.weight.grad": first.weight.grad.clone()}
    lines = lessons_plain(walk).splitlines()
    header = next(line for line in lines if line.lstrip().startswith("gradient "))
    without_at, with_at = header.index("without the hook"), header.index("with the hook")
    for row in grads[False]:
        shown = block(lines, starts_with(row), lambda line: line.endswith("✓"))
        assert_printed(" ".join(line[without_at:with_at] for line in shown),
                       grads[False][row].flatten().tolist(), f"{row} without")
        assert_printed(" ".join(line[with_at:].replace("changed", "") for line in shown),
                       grads[True][row].flatten().tolist(), f"{row} with")
    torch.testing.assert_close(grads[True]["x.grad"], grads[False]["x.grad"] * factor)


# --- forward-hook captures, matrix activations -------------------------------------------------


# (batch, features, hidden): activations whose rows fit the value column one row per line.
CAPTURE_CASES = {"rows_2x4": (2, 3, 4), "rows_3x5": (3, 4, 5), "rows_4x3": (4, 2, 3)}


@pytest.mark.parametrize("name", sorted(CAPTURE_CASES))
def test_capture_prints_the_activation_torch_computes(name: str) -> None:
    batch, features, hidden = CAPTURE_CASES[name]
    generator = torch.Generator().manual_seed(batch * 10 + hidden)
    x, weight, bias = (draw(generator, batch, features), draw(generator, hidden, features),
                       draw(generator, hidden))
    spec = f"""name: {name}
inputs:
  x: {{value: {tensor_text(x)}, requires_grad: true}}
modules:
  net:
    layers:
      fc: {{Linear: {{in_features: {features}, out_features: {hidden}}},
           weight: {tensor_text(weight)}, bias: {tensor_text(bias)}}}
      act: Sigmoid
    forward: {{args: [x], steps: ["h = fc(x)", "s = act(h)"]}}
forward: ["s = net(x)", "z = sum(s)"]
backward: z
captures:
  save_feat: {{module: net.fc, remove_after: 1}}
"""
    walk = capture_text(spec, f"test:{name}").walk
    assert_laid_out(walk)
    layer = nn.Linear(features, hidden)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
        expected = layer(x)
    lines = lessons_plain(walk).splitlines()
    header = next(line for line in lines if line.lstrip().startswith("entry"))
    value_at, check_at = header.index("value"), header.index("check")
    shown = block(lines, lambda line: line.lstrip().startswith("save_feat[0]"),
                  lambda line: "✓" in line)
    assert len(shown) == batch  # one row of the activation per line, the mark on the last
    assert_printed(" ".join(line[value_at:check_at] for line in shown),
                   expected.flatten().tolist(), "save_feat[0]")
