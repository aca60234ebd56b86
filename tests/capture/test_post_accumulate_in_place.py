"""A user's post-accumulate-grad hook that edits `.grad` in place (an optimizer- or
clipping-style hook) also changes what the leaf's AccumulateGrad node post-hook is handed: torch
runs post-accumulate hooks inside that node, before its post-hooks, and a first gradient becomes
`.grad` itself. That argument is marked as changed by the hook and not checked, as the `.grad`
is; plain torch's own Node post-hook says what it holds."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gradexplain.api import explain


def halve(parameter: torch.Tensor) -> None:
    assert parameter.grad is not None
    parameter.grad.mul_(0.5)


class Halved(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 2)
        self.a.weight.register_post_accumulate_grad_hook(halve)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.b(torch.tanh(self.a(x)))
        return out


def torch_node_hook_value(x: torch.Tensor) -> torch.Tensor:
    """What plain torch hands a post-hook on a.weight's AccumulateGrad node."""
    model = Halved()
    loss = model(x).sum()
    node = loss.grad_fn
    seen: list[torch.Tensor] = []
    accumulate: Any = None
    queue = [node]
    while queue:  # the AccumulateGrad node of a.weight, by its variable
        current = queue.pop()
        if current is None:
            continue
        if getattr(current, "variable", None) is model.a.weight:
            accumulate = current
            break
        queue.extend(child for child, _ in current.next_functions)
    assert accumulate is not None
    accumulate.register_hook(lambda inputs, outputs: seen.append(outputs[0].detach().clone()))
    loss.backward()
    assert len(seen) == 1
    return seen[0]


def test_the_node_hook_after_an_in_place_post_accumulate_hook_is_marked_changed() -> None:
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    handed = torch_node_hook_value(x)
    reference = Halved()
    true_gradient, = torch.autograd.grad(reference(x).sum(), reference.a.weight)
    assert torch.allclose(handed, 0.5 * true_gradient)  # torch: the halved .grad itself
    explanation = explain(Halved(), x)
    assert explanation.failures() == []
    found = 0
    for walk_pass in explanation.walk.passes:
        for event in walk_pass.events:
            if event.hook != "node" or event.node != "torch::autograd::AccumulateGrad":
                continue
            arg = event.args[0]
            if arg.meaning is None or arg.meaning.wrt != "a.weight":
                continue
            found += 1
            assert arg.meaning.modified_by == "halve" and arg.check is None
            assert arg.value is not None and arg.value.value is not None
            assert torch.allclose(torch.tensor(arg.value.value), handed)
    assert found == 2  # one in each pass
