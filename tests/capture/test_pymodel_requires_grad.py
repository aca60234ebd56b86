"""Python models' inputs that do not require grad: `explain()` takes requires_grad as given
(`requires_grad=` sets it), the command line's `--input 4x3:nograd`; against plain torch.

The classic question "why is legacy grad_input None?" (pytorch#86051, #149938): an input
without grad. The models are defined here; plain torch runs the same model on the same inputs,
their requires_grad as chosen, with its own module backward hooks on a copy, and gradexplain
must have recorded exactly what those hooks received, every label verified.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.api import Explanation, explain
from gradexplain.errors import GradexplainError
from tests.helpers.pycli import CLI, walk_json
from tests.helpers.pyoracle import (
    args_of,
    assert_close,
    assert_module_hooks_match,
    event,
    hook_calls,
    recorded,
    torch_inputs,
)

THIS = "tests/capture/test_pymodel_requires_grad.py"


class Gate(nn.Module):
    """A linear layer of x, gated by y: lin(x) * sigmoid(y)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gated: torch.Tensor = self.lin(x) * torch.sigmoid(y)
        return gated


class Net(nn.Module):
    """Two linear layers with a tanh between."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(torch.tanh(self.fc1(x)))
        return out


def make_net() -> nn.Module:
    return Net()


def make_gate() -> nn.Module:
    return Gate()


def model_of(make: Callable[[], nn.Module]) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make()


def as_chosen(tensors: list[torch.Tensor], grads: list[bool]) -> list[torch.Tensor]:
    return [tensor.detach().clone().requires_grad_(grad)
            for tensor, grad in zip(tensors, grads, strict=True)]


def total(output: torch.Tensor) -> torch.Tensor:
    return output.sum()


def assert_as_torch(result: Explanation, model: nn.Module, inputs: list[torch.Tensor],
                    grads: list[bool], names: list[str]) -> None:
    """Every check verified; the module hooks of both passes got what torch's get with the
    inputs' requires_grad as chosen; the final `.grad`s are torch's (None for an input
    without grad)."""
    walk = result.walk
    assert walk.checks() and result.failures() == []
    for mode in ("legacy", "full"):
        assert_module_hooks_match(walk, mode, hook_calls(copy.deepcopy(model),
                                                         as_chosen(inputs, grads), mode, total))
    plain = copy.deepcopy(model)
    tensors = as_chosen(inputs, grads)
    total(plain(*tensors)).backward()
    expected: dict[str, torch.Tensor | None] = dict(zip(names, (t.grad for t in tensors),
                                                        strict=True))
    expected.update({name: param.grad for name, param in plain.named_parameters()})
    for walk_pass in walk.passes:
        got = {grad.name: grad.value for grad in walk_pass.grads}
        assert sorted(got) == sorted(expected)
        for name, want in expected.items():
            if want is None:
                assert got[name] is None, name
            else:
                assert_close(recorded(got[name]), want, f"[{walk_pass.mode}] {name}")


def test_an_input_without_grad_stays_without_grad() -> None:
    """explain(model, x) with a plain randn x: the legacy hook of fc1 gets None for x's operand
    of addmm, the full hook of the model gets grad_input (None,), and x has no .grad."""
    model = model_of(make_net)
    inputs = torch_inputs((4, 3))
    result = explain(model, *inputs)
    assert_as_torch(result, model, inputs, [False], ["x"])
    legacy = args_of(event(result.walk, "legacy", "backward", "fc1"), "grad_input")
    assert any(arg.value is None and arg.meaning is None for arg in legacy)
    full = args_of(event(result.walk, "full", "full_backward", ""), "grad_input")
    assert [arg.value for arg in full] == [None]
    assert full[0].meaning is None


def test_an_input_that_requires_grad_keeps_it() -> None:
    model = model_of(make_net)
    inputs = torch_inputs((4, 3))
    result = explain(model, *as_chosen(inputs, [True]))
    assert_as_torch(result, model, inputs, [True], ["x"])
    full = args_of(event(result.walk, "full", "full_backward", ""), "grad_input")
    assert full[0].meaning is not None and full[0].meaning.wrt == "x"


@pytest.mark.parametrize(("given", "option", "grads"), [
    ([False, False], None, [False, False]),
    ([True, False], None, [True, False]),
    ([False, False], True, [True, True]),
    ([True, True], False, [False, False]),
    ([True, True], [False, True], [False, True]),
])
def test_requires_grad_as_given_or_as_set(given: list[bool], option: Any,
                                          grads: list[bool]) -> None:
    """Two inputs, each with or without grad. With one of them without grad, the full hook of
    Gate gets zeros for it (torch's wrapper fills them in), not None; the legacy hook of the
    mul gets None for the sigmoid operand."""
    model = model_of(make_gate)
    inputs = torch_inputs((4, 3), (4, 2))
    result = explain(model, *as_chosen(inputs, given), requires_grad=option)
    assert_as_torch(result, model, inputs, grads, ["x", "y"])


def test_shapes_are_made_with_grad_and_integer_inputs_never_have_it() -> None:
    model = nn.Embedding(10, 3)
    result = explain(model, torch.tensor([[1, 2], [3, 4]]), requires_grad=True)
    assert result.failures() == []
    assert {grad.name: grad.value is None for grad in result.walk.passes[0].grads} == {
        "input": True, "weight": False}
    made = explain(model_of(make_net), (4, 3))
    assert {grad.name: grad.value is not None for grad in made.walk.passes[0].grads}["x"]


@pytest.mark.parametrize(("inputs", "option", "says"), [
    ([torch.randn(4, 3)], [True, False], "one bool per input (1)"),
    ([torch.randn(4, 3)], "yes", "give True, False or one bool per input"),
    ([torch.tensor([[1, 2]])], [True], "cannot require grad"),
])
def test_bad_requires_grad_is_refused(inputs: list[torch.Tensor], option: Any,
                                      says: str) -> None:
    model: nn.Module = nn.Embedding(10, 3) if inputs[0].dtype == torch.int64 else nn.Linear(3, 2)
    with pytest.raises(GradexplainError) as raised:
        explain(model, *inputs, requires_grad=option)
    assert raised.value.exit_code == 2
    assert says in raised.value.one_line()


def test_nograd_on_the_command_line(cli: CLI) -> None:
    """`--input 4x3 --input 4x2:nograd`: y has no .grad, and the legacy hook of the model (on
    the mul) gets None for sigmoid(y)'s operand, as torch's does."""
    doc = walk_json(cli, f"{THIS}:make_gate", "--input", "4x3", "--input", "4x2:nograd")
    model = model_of(make_gate)
    inputs = torch_inputs((4, 3), (4, 2))
    x, y = as_chosen(inputs, [True, False])
    calls = hook_calls(copy.deepcopy(model), [x, y], "legacy", total)
    for walk_pass in doc["passes"]:
        assert walk_pass["grads"]["y"] is None
        assert_close(torch.tensor(walk_pass["grads"]["x"], dtype=torch.float64),
                     plain_grad(model, inputs), "x.grad")
    legacy = [item for item in doc["passes"][0]["events"]
              if item["hook"] == "backward" and item["target"] == ""]
    assert len(legacy) == 1
    got = [arg["value"] for arg in legacy[0]["args"] if arg["name"].startswith("grad_input")]
    want = calls[("backward", "")][0].grad_input
    assert [value is None for value in got] == [grad is None for grad in want]
    checks = [arg["check"] for walk_pass in doc["passes"] for item in walk_pass["events"]
              for arg in item["args"] if arg["check"] is not None]
    assert checks and all(check["verified"] for check in checks)


def plain_grad(model: nn.Module, inputs: list[torch.Tensor]) -> torch.Tensor:
    x, y = as_chosen(inputs, [True, False])
    total(copy.deepcopy(model)(x, y)).backward()
    assert x.grad is not None
    return x.grad


def test_nograd_help_and_bad_flags(cli: CLI) -> None:
    assert "4x3:nograd" in " ".join(cli("walk", "--help").stdout.split())
    result = cli("walk", f"{THIS}:make_net", "--input", "4x3:nograd:nograd")
    assert result.code == 2 and "each once" in result.stderr


def test_the_full_hook_zeros_for_an_input_without_grad_are_labelled_as_such() -> None:
    """torch's full hook gets zeros, not None, for y without grad while x has grad: the label
    says so, and its check (zeros, as torch passes them) holds."""
    model = model_of(make_gate)
    result = explain(model, *as_chosen(torch_inputs((4, 3), (4, 2)), [True, False]))
    full = args_of(event(result.walk, "full", "full_backward", ""), "grad_input")
    assert recorded(full[1].value).abs().sum().item() == 0.0
    assert full[1].meaning is not None and full[1].meaning.wrt == "y"
    assert "does not require grad" in full[1].meaning.text
    assert full[1].check is not None and full[1].check.verified
