"""A full backward hook can be handed a stale grad_output: torch's BackwardHook keeps the
grad_output its module's output wrapper saw until the input wrapper's hook uses it, so a call
that passes the module's output but never reaches its input (an autograd.grad that stops short,
or a call torch refuses midway) leaves it for the next call that reaches the module's input
without passing its output. The label says so, and the check compares it with the earlier
call's gradient. Plain torch, with the same calls and a plain full hook, is the oracle."""

from __future__ import annotations

import torch
from torch import nn

from tests.helpers.capture import capture_text

STALE_SPEC = """
name: stale
seed: 0
inputs:
  x: {value: [0.1, -0.2, 0.3], requires_grad: true}
  c: [1.0, 2.0, 3.0]
modules:
  m:
    forward: {args: [x], steps: ["q = x * x", "d = x * 2", "y = tanh(q + d)"]}
forward: ["y = m(x)", "s = sum(y * c)"]
grad:
  - {of: s, wrt: [m.q], retain_graph: true}
  - {of: m.d, wrt: [x], grad_outputs: ones, retain_graph: true}
"""


class Inner(nn.Module):
    """The spec's module m, keeping q and d for the calls to start from."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.q = x * x
        self.d = x * 2
        return torch.tanh(self.q + self.d)


def _plain() -> tuple[torch.Tensor, torch.Tensor]:
    """What a plain full hook on m is handed in the second call, and d(s)/d(y) in the first
    (the first call stops at q, short of m's input; the second starts from d, inside m)."""
    inner = Inner()
    handed: list[torch.Tensor] = []

    def hook(module: nn.Module, grad_input: tuple[torch.Tensor, ...],
             grad_output: tuple[torch.Tensor, ...]) -> None:
        handed.append(grad_output[0])

    inner.register_full_backward_hook(hook)
    x = torch.tensor([0.1, -0.2, 0.3], requires_grad=True)
    y = inner(x)
    s = (y * torch.tensor([1.0, 2.0, 3.0])).sum()
    torch.autograd.grad(s, [inner.q], retain_graph=True)
    assert handed == []
    torch.autograd.grad(inner.d, [x], torch.ones(3), retain_graph=True)
    (first,) = torch.autograd.grad(s, [y], retain_graph=True)
    return handed[0], first


def test_a_stale_grad_output_is_labelled_as_the_earlier_calls_and_verified() -> None:
    session = capture_text(STALE_SPEC, "stale.yaml")
    assert session.walk.failures() == []
    full = session.walk.passes[1]
    (event,) = [item for item in full.events
                if item.hook == "full_backward" and item.target == "m"]
    assert event.run == 2
    grad_output = next(arg for arg in event.args if arg.name == "grad_output[0]")
    meaning = grad_output.meaning
    assert meaning is not None and meaning.kind == "stale" and meaning.stale_from == 1
    assert meaning.of == "s" and "stale" in meaning.text and "call 1" in meaning.text
    assert grad_output.check is not None and grad_output.check.verified
    handed, first = _plain()
    torch.testing.assert_close(handed, first)  # torch's own: the first call's gradient
    assert grad_output.value is not None and grad_output.value.value is not None
    torch.testing.assert_close(torch.tensor(grad_output.value.value), handed)
    legacy = session.walk.passes[0]
    assert not any(arg.meaning is not None and arg.meaning.kind == "stale"
                   for item in legacy.events for arg in item.args)
