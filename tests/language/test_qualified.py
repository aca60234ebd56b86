"""Qualified names (`m.h`, `m.p`): where they work (backward, grad, the output) and where they do
not (inside a step), with the advice a refusal gives, which must itself work when followed.

Refusals go through `gradexplain validate` (exit 2, the place of the dotted name, the fix named);
the accepted forms run through `gradexplain walk --format json`, against plain PyTorch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.helpers.cli import run_cli
from tests.helpers.walkjson import walk

# Module m computes h from its argument, then returns o; the top level adds STEP to m's output.
MODULE_M = """
inputs:
  x: {value: [1.0, -2.0], requires_grad: true}
modules:
  m:
    params: {p: [3.0, 0.5]}
    layers:
      l: {Linear: {in_features: 2, out_features: 2}, weight: [[1.0, 2.0], [0.5, -1.0]],
          bias: [0.1, 0.2]}
    forward: {args: [a], steps: ["h = p * a", "o = sigmoid(l(h))"]}
forward: ["y = m(x)", "z = sum(y + STEP)"]
backward: z
"""
STEP_LINE, STEP_COLUMN = next((number, line.index("STEP") + 1) for number, line
                              in enumerate(MODULE_M.splitlines(), 1) if "STEP" in line)


@pytest.mark.parametrize(("step", "names"), [
    # A step result or a parameter inside m: return it from m, and unpack the call.
    ("m.h", ("'m.h'", "returns: [o, h]", "o, h = m(")),
    ("m.p * 2", ("'m.p'", "returns: [o, p]", "o, p = m(")),
    ("m.h.T", ("'m.h'", "returns: [o, h]")),
    # What m returns already: use the call's result.
    ("m.o", ("'m.o'", "o = m(")),
    # A layer's weights are no names at all: declare a parameter.
    ("m.l.weight[0]", ("'m.l.weight'", "params:")),
    ("m.l(x)", ("'m.l'", "call 'm'")),
    ("m.a", ("'m.a'", "passed to 'm'")),
    ("m.q", ("defines no 'q'",)),
    # Methods and modules of Python: the catalogue's function by its bare name.
    ("x.exp()", ("attribute access '.exp'", "`exp(x)`")),
    ("torch.exp(x)", ("attribute access '.exp'", "`exp(...)`")),
    ("x.shape[0]", ("attribute access '.shape'", "only `.T`")),
])
def test_dotted_names_in_steps_are_refused_with_advice(
    step: str, names: tuple[str, ...], write_spec: Callable[[str], Path],
) -> None:
    path = write_spec(MODULE_M.replace("STEP", step))
    result = run_cli("validate", str(path))
    assert result.code == 2, result
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}:{STEP_LINE}:{STEP_COLUMN}: "), result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    for name in names:
        assert name in result.stderr, (name, result.stderr)
    # The old advice, `call the function instead, e.g. h(x)`, named functions that do not exist.
    assert "e.g." not in result.stderr and "h(x)" not in result.stderr
    if not step.startswith(("x.exp", "torch.exp")):
        assert "call the function" not in result.stderr


def test_a_module_called_twice_gets_the_same_advice(write_spec: Callable[[str], Path]) -> None:
    text = MODULE_M.replace('"y = m(x)", "z = sum(y + STEP)"',
                            '"y1 = m(x)", "y = m(y1)", "z = sum(y + m.h)"')
    result = run_cli("validate", str(write_spec(text)))
    assert result.code == 2, result
    assert "returns: [o, h]" in result.stderr and "Traceback" not in result.stderr


def _plain_m(x: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Module m of MODULE_M in plain torch: (o, h)."""
    layer = torch.nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0], [0.5, -1.0]]))
        layer.bias.copy_(torch.tensor([0.1, 0.2]))
    h = p * x
    return torch.sigmoid(layer(h)), h


@pytest.mark.parametrize(("returns", "steps", "plain"), [
    # The advice followed: m returns h too, and the top level unpacks it.
    ("[o, h]", '"y, h = m(x)", "z = sum(y + h)"', lambda o, h, p: (o + h).sum()),
    ("[o, p]", '"y, q = m(x)", "z = sum(y * q)"', lambda o, h, p: (o * p).sum()),
    ("[h, o]", '"h, y = m(x)", "z = sum(y) + sum(h * h)"',
     lambda o, h, p: o.sum() + (h * h).sum()),
])
def test_returning_the_value_from_the_module_works(
    returns: str, steps: str, plain: Callable[..., torch.Tensor],
    write_spec: Callable[[str], Path],
) -> None:
    text = (MODULE_M.replace('"o = sigmoid(l(h))"]}', f'"o = sigmoid(l(h))"], returns: {returns}}}')
            .replace('"y = m(x)", "z = sum(y + STEP)"', steps))
    result = walk(write_spec(text))
    assert result.code == 0, result.stderr
    x = torch.tensor([1.0, -2.0], requires_grad=True)
    p = torch.tensor([3.0, 0.5], requires_grad=True)
    o, h = _plain_m(x, p)
    plain(o, h, p).backward()
    for mode in ("legacy", "full"):
        grads = result.grads(mode)
        torch.testing.assert_close(torch.tensor(grads["x"]), x.grad)
        torch.testing.assert_close(torch.tensor(grads["m.p"]), p.grad)


@pytest.mark.parametrize("gradient", [[1.0, 1.0], [2.0, -0.5]])
def test_qualified_names_work_in_backward(gradient: list[float],
                                          write_spec: Callable[[str], Path]) -> None:
    # `backward: {of: m.h}`: the qualified name of the step h inside m.
    text = (MODULE_M.replace('"z = sum(y + STEP)"', '"z = sum(y)"')
            .replace("backward: z", f"backward: {{of: m.h, gradient: {gradient}}}"))
    result = walk(write_spec(text))
    assert result.code == 0, result.stderr
    x = torch.tensor([1.0, -2.0], requires_grad=True)
    p = torch.tensor([3.0, 0.5], requires_grad=True)
    _, h = _plain_m(x, p)
    h.backward(torch.tensor(gradient))
    for mode in ("legacy", "full"):
        torch.testing.assert_close(torch.tensor(result.grads(mode)["x"]), x.grad)
        torch.testing.assert_close(torch.tensor(result.grads(mode)["m.p"]), p.grad)
