"""The capture as a whole on the article's two modules: the chain-rule derivation and the final
`.grad`s against plain torch, and every example spec walking with every check verified."""

from __future__ import annotations

import pytest
import torch

from gradexplain.language import load_spec
from gradexplain.records.walk import Walk
from tests.helpers.articles import MyModule, MyModule2
from tests.helpers.capture import walk
from tests.helpers.cli import SPECS

TWO_MODULES = SPECS / "two_modules.yaml"


@pytest.fixture(scope="module")
def two_modules() -> Walk:
    return walk(load_spec(TWO_MODULES), "specs/two_modules.yaml")


def article_grads() -> dict[str, torch.Tensor]:
    """The article's model in plain torch, with the spec's numbers: dz/d(every tensor)."""
    x = torch.tensor(5.0, requires_grad=True)
    first, second = MyModule(), MyModule2()
    with torch.no_grad():
        first.p.copy_(torch.tensor([3.0, 4.0]))
        second.l.weight.copy_(torch.tensor([[-0.1490, 0.0568]]))
    y = first(x)
    t = second.l(y)
    z = torch.sigmoid(t)
    names = {"x": x, "module.p": first.p, "module2.l.weight": second.l.weight, "y": y, "t": t}
    grads = torch.autograd.grad(z, list(names.values()))
    return dict(zip(names, grads, strict=True))


def test_derivation_matches_plain_torch(two_modules: Walk) -> None:
    expected = article_grads()
    (derivation,) = two_modules.derivations
    assert derivation.of == "z" and derivation.kind == "backward"
    nodes = [line.node for line in derivation.lines]
    assert nodes[0] == "SigmoidBackward0"
    assert nodes.index("MulBackward0") > nodes.index("MmBackward0")
    sigmoid = derivation.lines[0]
    (term,) = sigmoid.terms
    assert term.wrt == "module2.t" and "σ" in term.local
    assert term.value is not None
    assert torch.allclose(torch.tensor(term.value.value), expected["t"])
    mul = next(line for line in derivation.lines if line.node == "MulBackward0")
    by_name = {item.wrt: item for item in mul.terms}
    assert set(by_name) == {"module.p", "x"}
    for name in ("module.p", "x"):
        value = by_name[name].value
        assert value is not None
        assert torch.allclose(torch.tensor(value.value), expected[name])
        result = by_name[name].check
        assert result is not None and result.verified


def test_final_grads_match_plain_torch(two_modules: Walk) -> None:
    expected = article_grads()
    for walk_pass in two_modules.passes:
        grads = {grad.name: grad for grad in walk_pass.grads}
        for name in ("x", "module.p", "module2.l.weight"):
            value = grads[name].value
            assert value is not None
            assert torch.allclose(torch.tensor(value.value), expected[name])
            result = grads[name].check
            assert result is not None and result.verified


def test_every_spec_walks_with_every_check_verified() -> None:
    for path in sorted(SPECS.glob("*.yaml")):
        result = walk(load_spec(path), str(path))
        assert result.failures() == [], path.name
        checked = [arg for walk_pass in result.passes for event in walk_pass.events
                   for arg in event.args if arg.check is not None]
        assert checked, path.name
