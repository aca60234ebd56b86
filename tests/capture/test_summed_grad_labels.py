"""`.grad` after several backward calls without zeroing holds the sum of each call's own
derivative; its label says so, naming every call's output, not the last call's alone
(`x.grad = ∂a/∂x + ∂b/∂x`, not `Σ of 2 backward calls' ∂b/∂x`, which is 2·∂b/∂x).

The oracle is plain torch: the same backward calls, in order, give the `.grad` after each,
which the label's value and check must match; the label must name every output gone back from
so far.
"""

from __future__ import annotations

import re

import pytest
import torch

from gradexplain.records.walk import Walk
from tests.helpers.capture import capture_text

X = [1.0, -2.0]

# (id, forward steps, the outputs backpropagated in order, the formula of each in plain torch)
CASES = [
    ("two_outputs", ["a = sum(x * 2)", "b = sum(x * 3)"], ["a", "b"],
     {"a": lambda x: (x * 2).sum(), "b": lambda x: (x * 3).sum()}),
    ("one_output_twice_then_another", ["a = sum(x * x)", "b = sum(x * 3)"], ["a", "a", "b"],
     {"a": lambda x: (x * x).sum(), "b": lambda x: (x * 3).sum()}),
    ("three_outputs", ["a = sum(x * 2)", "b = sum(exp(x))", "c = sum(x * x * x)"],
     ["c", "a", "b"],
     {"a": lambda x: (x * 2).sum(), "b": lambda x: torch.exp(x).sum(),
      "c": lambda x: (x * x * x).sum()}),
]


def _spec(steps: list[str], order: list[str]) -> str:
    backward = "".join(f"  - {{of: {name}, retain_graph: true}}\n" for name in order)
    forward = "".join(f'  - "{step}"\n' for step in steps)
    return (f"name: summed\ninputs:\n  x: {{value: {X}, requires_grad: true}}\n"
            f"forward:\n{forward}backward:\n{backward}")


def _accumulated_labels(walk: Walk, mode: str) -> list[tuple[str, torch.Tensor]]:
    found = next(item for item in walk.passes if item.mode == mode)
    labels = []
    for event in found.events:
        if event.hook == "post_accumulate_grad" and event.target == "x":
            arg = event.args[0]
            assert arg.meaning is not None and arg.value is not None
            assert arg.check is not None and arg.check.verified, arg.meaning.text
            labels.append((arg.meaning.text, torch.tensor(arg.value.value, dtype=torch.float64)))
    return labels


@pytest.mark.parametrize(("steps", "order", "formulas"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_each_calls_output_is_named_and_the_sum_is_torchs(
        steps: list[str], order: list[str], formulas: dict[str, object]) -> None:
    walk = capture_text(_spec(steps, order), "summed.yaml").walk
    x = torch.tensor(X, requires_grad=True)
    expected: list[tuple[set[str], torch.Tensor]] = []
    for number, name in enumerate(order):
        formula = formulas[name]
        assert callable(formula)
        formula(x).backward()
        assert x.grad is not None
        expected.append(({*order[:number + 1]}, x.grad.clone()))
    for mode in ("legacy", "full"):
        labels = _accumulated_labels(walk, mode)
        assert len(labels) == len(order)
        for (text, value), (outputs, grad) in zip(labels, expected, strict=True):
            assert torch.allclose(value, grad.double(), rtol=1e-5, atol=1e-6), text
            named = set(re.findall(r"∂(\w+)/∂x", text))
            assert named == outputs, text


def test_a_call_whose_output_does_not_depend_on_the_leaf_is_left_out() -> None:
    text = ("name: unreached\ninputs:\n  x: {value: [1.0, 2.0], requires_grad: true}\n"
            "  y: {value: [1.0, 3.0], requires_grad: true}\n"
            "forward: ['a = sum(x * 2)', 'd = sum(y * 3)']\n"
            "backward:\n  - {of: a, retain_graph: true}\n  - {of: d}\n  - {of: a}\n")
    walk = capture_text(text, "unreached.yaml").walk
    x = torch.tensor(X, requires_grad=True)
    for _ in range(2):
        (x * 2).sum().backward()
    assert x.grad is not None
    for mode in ("legacy", "full"):
        text_of_last, value = _accumulated_labels(walk, mode)[-1]
        assert set(re.findall(r"∂(\w+)/∂x", text_of_last)) == {"a"}, text_of_last
        assert torch.allclose(value, x.grad.double())
