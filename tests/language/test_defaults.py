"""The defaults the README's spec-language table states, each shown to be what happens: a
module's `returns` is its last step's result (all its names, for `a, b = ...`), the top level's
too, and an input's `requires_grad` is false unless given. Walks run through the command line;
plain PyTorch, written here, is the oracle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.walkjson import arg, walk

MODES = ("legacy", "full")


def assert_grads(grads: dict[str, Any], expected: dict[str, torch.Tensor | None]) -> None:
    for name, plain in expected.items():
        if plain is None:
            assert grads[name] is None, (name, grads[name])
        else:
            torch.testing.assert_close(torch.tensor(grads[name], dtype=plain.dtype), plain)


# --- returns: the last step's result -----------------------------------------------------------

def _one_return(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(p * x) * 3  # the last of a = p * x, b = sigmoid(a), c = b * 3


def _two_returns(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    u, v = torch.chunk(p * x, 2)
    return u.sum() + (v * v).sum()


def _nested(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return torch.tanh(p * x) * p


RETURNS = [
    # (module steps, top-level steps, plain torch of the top level's z)
    ('["a = p * x", "b = sigmoid(a)", "c = b * 3"]', '["y = m(x)", "z = sum(y)"]',
     lambda x, p: _one_return(x, p).sum()),
    ('["a = p * x", "u, v = chunk(a, 2)"]', '["s, t = m(x)", "z = sum(s) + sum(t * t)"]',
     _two_returns),
    ('["a = tanh(p * x)", "b = a * p"]', '["y = m(x)", "z = sum(y)"]',
     lambda x, p: _nested(x, p).sum()),
]


@pytest.mark.parametrize(("module_steps", "top_steps", "plain"), RETURNS,
                         ids=["last-of-three", "unpacked-pair", "uses-a-param-twice"])
def test_a_module_returns_its_last_step_by_default(
    module_steps: str, top_steps: str, plain: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    write_spec: Callable[[str], Path],
) -> None:
    spec = f"""
inputs:
  x: {{value: [1.0, -2.0, 0.5, 3.0], requires_grad: true}}
modules:
  m:
    params: {{p: [0.3, 0.7, -1.2, 2.0]}}
    forward: {{args: [x], steps: {module_steps}}}
forward: {top_steps}
backward: z
"""
    result = walk(write_spec(spec))
    assert result.code == 0, result.stderr
    x = torch.tensor([1.0, -2.0, 0.5, 3.0], requires_grad=True)
    p = torch.tensor([0.3, 0.7, -1.2, 2.0], requires_grad=True)
    plain(x, p).backward()
    for mode in MODES:
        assert_grads(result.grads(mode), {"x": x.grad, "m.p": p.grad})


@pytest.mark.parametrize(("steps", "plain"), [
    ('["y = x * 2", "z = sum(y * y)"]', lambda x: ((x * 2) * (x * 2)).sum()),
    ('["y = exp(x)", "w = y - x", "z = sum(w)"]', lambda x: (torch.exp(x) - x).sum()),
])
def test_the_top_level_returns_its_last_step_by_default(
    steps: str, plain: Callable[[torch.Tensor], torch.Tensor],
    write_spec: Callable[[str], Path],
) -> None:
    # What the model returns is what its forward hook sees as `output`.
    spec = f"inputs:\n  x: {{value: [0.5, -1.0], requires_grad: true}}\nforward: {steps}\n" \
           "backward: z\n"
    result = walk(write_spec(spec))
    assert result.code == 0, result.stderr
    expected = plain(torch.tensor([0.5, -1.0]))
    for mode in MODES:
        output = arg(result.event(mode, "forward", ""), "output")
        torch.testing.assert_close(torch.tensor(output["value"]), expected)


# --- requires_grad: false unless given ---------------------------------------------------------

REQUIRES_GRAD = [
    # (the input x as written, x in plain torch: requires_grad left at torch's default, False)
    ("[1.0, 2.0]", lambda: torch.tensor([1.0, 2.0])),
    ("{value: [1.0, 2.0]}", lambda: torch.tensor([1.0, 2.0])),
    ("{value: [1.0, 2.0], dtype: float64}", lambda: torch.tensor([1.0, 2.0],
                                                                  dtype=torch.float64)),
    ("{ones: [2]}", lambda: torch.ones(2)),
]


@pytest.mark.parametrize(("written", "plain_x"), REQUIRES_GRAD,
                         ids=["literal", "value", "float64", "ones"])
def test_an_input_does_not_require_grad_unless_told(
    written: str, plain_x: Callable[[], torch.Tensor], write_spec: Callable[[str], Path],
) -> None:
    spec = f"""
inputs:
  x: {written}
  w: {{value: [0.5, -1.5], requires_grad: true}}
forward: ["y = x * w", "z = sum(y * y)"]
backward: z
"""
    result = walk(write_spec(spec))
    assert result.code == 0, result.stderr
    x = plain_x()
    w = torch.tensor([0.5, -1.5], dtype=x.dtype, requires_grad=True)
    ((x * w) * (x * w)).sum().backward()
    assert x.grad is None
    for mode in MODES:
        assert_grads(result.grads(mode), {"x": None, "w": w.grad})
