"""Hooks a model registers as it runs (`h.register_hook(...)` inside forward) are the user's too.

No build carries them: each forward registers them anew, the check run's too. Before, the check
run ran them, so a gradient reversal's negated gradients were confirmed as the true derivatives
(`∂loss/∂x ✓`), and a hook zeroing a gradient made true labels fail. Now a pass records them as it
records the hooks a model comes with, what they change is marked changed and not checked, and the
check run leaves them out.

Torch is the oracle: each model runs in plain PyTorch with its hooks (what `.grad` is in the
pass) and without them (the true derivatives: `hooked=False` registers nothing).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.api import explain

Grads = dict[str, torch.Tensor]


def _reverse(grad: torch.Tensor) -> torch.Tensor:
    return -grad


def _zero(grad: torch.Tensor) -> torch.Tensor:
    return grad * 0


def _look(grad: torch.Tensor) -> None:
    SEEN.append(grad.detach().clone())


def _double_in_place(grad: torch.Tensor) -> None:
    grad.mul_(2)


def _triple(grad: torch.Tensor) -> torch.Tensor:
    return grad * 3


def _halve_grad(parameter: torch.Tensor) -> None:
    assert parameter.grad is not None
    parameter.grad = parameter.grad * 0.5


def _damp(grad: torch.Tensor) -> torch.Tensor:
    return grad * 0.5


SEEN: list[torch.Tensor] = []


class Net(nn.Module):
    """Two Linears with a tanh between them; `hook(self, x, h)` registers the model's hooks."""

    def __init__(self, hook: str) -> None:
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 2)
        self.hook = hook
        self.hooked = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.hooked and self.hook == "input":
            x.register_hook(_zero)  # the forward's argument: in the full pass, a wrapper's view
        h = self.a(x).tanh()  # made in the forward, named by no module when hooked
        if self.hooked:
            if self.hook == "reversal":
                h.register_hook(_reverse)
            elif self.hook == "look":
                h.register_hook(_look)
            elif self.hook == "in_place":
                h.register_hook(_double_in_place)
            elif self.hook == "parameter":
                self.a.weight.register_hook(_triple)
            elif self.hook == "accumulated":
                self.a.bias.register_post_accumulate_grad_hook(_halve_grad)
        out: torch.Tensor = self.b(h)
        return out


class Steps(nn.Module):
    """One cell unrolled three times, each step's state damped by a hook of the step."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(3, 3)
        self.hooked = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = x
        for _ in range(3):
            state = torch.tanh(self.cell(state))
            if self.hooked:
                state.register_hook(_damp)
        return state


MODELS = ["reversal", "input", "look", "in_place", "parameter", "accumulated", "steps"]
CHANGING = {"reversal", "input", "in_place", "parameter", "accumulated", "steps"}


def _model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return Steps() if name == "steps" else Net(name)


def _x() -> torch.Tensor:
    return torch.randn(2, 3, generator=torch.Generator().manual_seed(1))


def _plain(model: nn.Module, hooked: bool) -> Grads:
    """`.grad` of the input and every parameter in plain torch, on a copy of the model."""
    copied: Any = copy.deepcopy(model)
    copied.hooked = hooked
    x = _x().requires_grad_()
    copied(x).sum().backward()
    assert x.grad is not None
    grads = {"x": x.grad}
    for name, parameter in copied.named_parameters():
        assert parameter.grad is not None
        grads[name] = parameter.grad
    return grads


@pytest.fixture(scope="module")
def walked() -> dict[str, tuple[nn.Module, Any]]:
    originals = (torch.Tensor.register_hook, torch.Tensor.register_post_accumulate_grad_hook)
    done = {}
    for name in MODELS:
        model = _model(name)
        done[name] = (model, explain(model, _x().requires_grad_()))
        # what the walk put on torch.Tensor for its passes is taken off again
        assert (torch.Tensor.register_hook,
                torch.Tensor.register_post_accumulate_grad_hook) == originals
    return done


@pytest.mark.parametrize("name", MODELS)
def test_grads_are_what_torch_gives_and_changed_ones_are_not_checked(
        walked: dict[str, tuple[nn.Module, Any]], name: str) -> None:
    model, explanation = walked[name]
    hooked, true = _plain(model, True), _plain(model, False)
    changed = {leaf for leaf in true if not torch.allclose(hooked[leaf], true[leaf])}
    # the oracle itself: the hooks that change something do change a `.grad`
    assert bool(changed) == (name in CHANGING)
    assert explanation.failures() == []
    for walk_pass in explanation.walk.passes:
        final = {grad.name: grad for grad in walk_pass.grads}
        assert set(final) == set(true)
        for leaf, grad in final.items():
            assert grad.value is not None and grad.value.value is not None
            torch.testing.assert_close(torch.tensor(grad.value.value), hooked[leaf])
            if leaf in changed:
                assert grad.modified_by is not None and grad.check is None, (leaf,)
            else:
                assert grad.check is not None and grad.check.verified, (leaf,)


@pytest.mark.parametrize("name", MODELS)
def test_no_hooked_value_is_verified_as_a_true_derivative(
        walked: dict[str, tuple[nn.Module, Any]], name: str) -> None:
    """At every tensor hook and post-accumulate hook on a leaf: a value marked verified is the
    true derivative, and one that is not the true derivative is marked changed."""
    model, explanation = walked[name]
    true = _plain(model, False)
    seen = 0
    for walk_pass in explanation.walk.passes:
        for event in walk_pass.events:
            if event.hook not in ("tensor", "post_accumulate_grad") or event.target not in true:
                continue
            for arg in event.args:
                if arg.meaning is None or arg.value is None or arg.value.value is None:
                    continue
                seen += 1
                value = torch.tensor(arg.value.value)
                if arg.check is not None and arg.check.verified:
                    torch.testing.assert_close(value, true[event.target])
                if not torch.allclose(value, true[event.target]):
                    assert arg.meaning.modified_by is not None, (walk_pass.mode, event.seq)
                if arg.check is None:
                    assert arg.meaning.modified_by is not None, (walk_pass.mode, event.seq)
    assert seen >= 2 * len(true)  # every leaf's own hook, in both passes


@pytest.mark.parametrize("name", MODELS)
def test_each_pass_lists_the_hooks_the_forward_registered(
        walked: dict[str, tuple[nn.Module, Any]], name: str) -> None:
    _, explanation = walked[name]
    function = {"reversal": "_reverse", "input": "_zero", "look": "_look",
                "in_place": "_double_in_place", "parameter": "_triple",
                "accumulated": "_halve_grad", "steps": "_damp"}[name]
    for walk_pass in explanation.walk.passes:
        listed = [hook for hook in walk_pass.user_hooks if hook.function == function]
        assert listed and all(hook.ran for hook in listed), walk_pass.mode
        calls = [event for event in walk_pass.events if event.user == function]
        assert calls, walk_pass.mode
        assert any(event.changed for event in calls) == (name in CHANGING)


def test_a_looking_hook_sees_what_torch_hands_it(
        walked: dict[str, tuple[nn.Module, Any]]) -> None:
    """Recorded, the hook still runs in each pass: as many calls as plain torch makes, with
    the same gradient; and none in the check run."""
    model, _ = walked["look"]
    SEEN.clear()
    _plain(model, True)
    assert len(SEEN) == 1
    expected = SEEN[0]
    SEEN.clear()
    explanation = explain(_model("look"), _x().requires_grad_())
    assert len(SEEN) == 2  # the legacy and the full pass; the check run registers nothing
    for seen in SEEN:
        torch.testing.assert_close(seen, expected)
    assert explanation.failures() == []
