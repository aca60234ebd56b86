"""A module that returns one of its arguments as it got it: its output is named after the op
that made that argument in both passes (the full hook's wrapper is looked through along that
argument's own edge), and the legacy hook's explanation says the op was made before the module
ran. Plain torch's hooks, registered here, are the oracle."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from gradexplain import explain


class Pick(nn.Module):
    def forward(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        return second


class Second(nn.Module):
    """`pick(sigmoid(a(x)), tanh(b(x)))`: the output is tanh(b(x)), made by the caller."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)
        self.pick = Pick()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.pick(torch.sigmoid(self.a(x)), torch.tanh(self.b(x)))
        return out


def _plain_legacy_pick(model: Second, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What a plain legacy hook on `pick` receives as grad_input[0], and d(loss)/d(b(x))."""
    plain = copy.deepcopy(model)
    seen: list[tuple[torch.Tensor, ...]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain.pick.register_backward_hook(
            lambda module, grad_input, grad_output: seen.append(grad_input))
        inner = plain.b(x.detach().clone().requires_grad_())
        loss = plain.pick(torch.sigmoid(plain.a(x)), torch.tanh(inner)).sum()
        (expected,) = torch.autograd.grad(loss, [inner], retain_graph=True)
        loss.backward()
    return seen[0][0], expected


def test_a_module_returning_its_second_argument_is_named_and_explained_truthfully() -> None:
    torch.manual_seed(0)
    model = Second()
    x = torch.randn(2, 3, requires_grad=True)
    result = explain(model, x)
    assert result.failures() == []
    for trace in result.session.traces:
        names = {name for record in trace.tensors for name in record.names
                 if name.startswith("pick:")}
        assert names == {"pick:tanh"}, (trace.mode, names)
    legacy = result.walk.passes[0]
    pick = next(event for event in legacy.events
                if event.hook == "backward" and event.target == "pick")
    assert pick.why is not None and "made before pick.forward ran" in pick.why
    assert "returns its argument 1" in pick.why
    top = next(event for event in legacy.events
               if event.hook == "backward" and event.target == "")
    assert top.why is not None and "the last op of the model's forward" in top.why
    received, expected = _plain_legacy_pick(model, x)
    value = pick.args[0].value
    assert value is not None and value.value is not None
    torch.testing.assert_close(torch.tensor(value.value), received)
    torch.testing.assert_close(received, expected)
    meaning = pick.args[0].meaning
    assert meaning is not None and meaning.wrt == "b:addmm"
    assert pick.args[0].check is not None and pick.args[0].check.verified
