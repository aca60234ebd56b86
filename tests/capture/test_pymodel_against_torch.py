"""Python models (`gradexplain walk FILE.py:NAME` and `gradexplain.explain()`): labels and values
against torch.

Each test rebuilds the model with the same factory under `torch.manual_seed(0)` and the same
inputs (`torch.manual_seed(0); torch.randn(...)`, one draw per input in order), runs it in plain
PyTorch with its own `register_backward_hook` / `register_full_backward_hook` hooks or a plain
`loss.backward()`, and compares what torch handed those hooks with what gradexplain recorded and
labelled (tests/helpers/pyoracle.py).
"""

from __future__ import annotations

import pytest
import torch

from gradexplain.api import Explanation
from tests.helpers import pymodels
from tests.helpers.pyoracle import (
    GOOD_MODELS,
    args_of,
    assert_args_equal,
    assert_close,
    assert_module_hooks_match,
    event,
    explained,
    input_names,
    labels,
    plain_run,
    recorded,
    torch_hook_calls,
    torch_inputs,
)


@pytest.fixture(scope="module")
def mlp() -> Explanation:
    return explained("mlp")


@pytest.fixture(scope="module")
def cnn() -> Explanation:
    return explained("cnn")


@pytest.mark.parametrize("loss", ["sum", "mean"])
@pytest.mark.parametrize("name", sorted(GOOD_MODELS))
def test_every_check_verified(name: str, loss: str) -> None:
    result = explained(name, loss)
    assert result.walk.checks(), "a walk with no checks proves nothing"
    assert result.failures() == []


@pytest.mark.parametrize("mode", ["legacy", "full"])
@pytest.mark.parametrize("name", sorted(GOOD_MODELS))
def test_module_hook_arguments_are_what_torch_hands_its_hooks(name: str, mode: str) -> None:
    """Every module backward hook gradexplain recorded (every module, both passes, pre hooks
    too) holds what the same hook, registered in plain torch, receives: the same calls, the same
    number of arguments, the same values, None where torch passes None."""
    make, shapes = GOOD_MODELS[name]
    walk = explained(name).walk
    expected = torch_hook_calls(make, torch_inputs(*shapes), mode)
    assert_module_hooks_match(walk, mode, expected)


def test_legacy_hook_of_a_linear_head_is_the_operands_of_addmm(mlp: Explanation) -> None:
    """register_backward_hook on `head` (a Linear) sits on AddmmBackward0, so its grad_input is
    addmm's operands (bias, input, weightᵀ), not the gradient of head's input alone. Each label
    is checked against torch's own `.grad`s and retained gradients of a plain run."""
    head = event(mlp.walk, "legacy", "backward", "head")
    assert head.node == "AddmmBackward0"
    grad_input, grad_output = args_of(head, "grad_input"), args_of(head, "grad_output")
    assert labels(grad_input) == ["∂loss/∂head.bias", "∂loss/∂encoder.3:tanh",
                                  "(∂loss/∂head.weight)ᵀ"]
    assert [arg.meaning.layout for arg in grad_input if arg.meaning] == [
        "as-is", "as-is", "transposed"]
    assert labels(grad_output) == ["∂loss/∂output"]

    plain = plain_run(pymodels.make_mlp, torch_inputs(pymodels.MLP_INPUT))
    params = dict(plain.model.named_parameters())
    assert params["head.bias"].grad is not None and params["head.weight"].grad is not None
    assert_close(recorded(grad_input[0].value), params["head.bias"].grad, "∂loss/∂head.bias")
    assert_close(recorded(grad_input[1].value), plain.output_grad("encoder.3"),
                 "∂loss/∂encoder.3:tanh")
    assert_close(recorded(grad_input[2].value), params["head.weight"].grad.T,
                 "(∂loss/∂head.weight)ᵀ")
    assert_close(recorded(grad_output[0].value), plain.output_grad(""), "∂loss/∂output")

    torch_call = torch_hook_calls(pymodels.make_mlp, torch_inputs(pymodels.MLP_INPUT),
                                  "legacy")[("backward", "head")]
    assert_args_equal(grad_input, torch_call[0].grad_input, "legacy head")


def test_full_hook_of_a_linear_head_is_the_gradient_of_its_input(mlp: Explanation) -> None:
    head = event(mlp.walk, "full", "full_backward", "head")
    grad_input = args_of(head, "grad_input")
    assert labels(grad_input) == ["∂loss/∂encoder.3:tanh"]  # head's input, and nothing else
    plain = plain_run(pymodels.make_mlp, torch_inputs(pymodels.MLP_INPUT))
    assert_close(recorded(grad_input[0].value), plain.output_grad("encoder"), "∂loss/∂(input)")
    torch_call = torch_hook_calls(pymodels.make_mlp, torch_inputs(pymodels.MLP_INPUT),
                                  "full")[("full_backward", "head")]
    assert_args_equal(grad_input, torch_call[0].grad_input, "full head")


def test_cnn_labels_are_what_torch_says(cnn: Explanation) -> None:
    """The conv's legacy hook sits on ConvolutionBackward0: (input, weight, bias) in that order,
    none transposed; the fc's legacy hook sees Flatten's output; full hooks see each module's
    input. Values from a plain run's `.grad`s and retained gradients."""
    plain = plain_run(pymodels.make_cnn, torch_inputs(pymodels.CNN_INPUT))
    grads = plain.grads(["images"])

    conv = event(cnn.walk, "legacy", "backward", "conv")
    assert conv.node == "ConvolutionBackward0"
    conv_in = args_of(conv, "grad_input")
    assert labels(conv_in) == ["∂loss/∂images", "∂loss/∂conv.weight", "∂loss/∂conv.bias"]
    for arg, name in zip(conv_in, ("images", "conv.weight", "conv.bias"), strict=True):
        assert_close(recorded(arg.value), grads[name], f"legacy conv {arg.name}")
    assert labels(args_of(conv, "grad_output")) == ["∂loss/∂conv:convolution"]

    fc = args_of(event(cnn.walk, "legacy", "backward", "fc"), "grad_input")
    assert labels(fc) == ["∂loss/∂fc.bias", "∂loss/∂flat:view", "(∂loss/∂fc.weight)ᵀ"]
    assert_close(recorded(fc[1].value), plain.output_grad("flat"), "∂loss/∂flat:view")

    expected_full = {"conv": ("∂loss/∂images", None), "act": ("∂loss/∂conv:convolution", "conv"),
                     "pool": ("∂loss/∂act:relu", "act"),
                     "flat": ("∂loss/∂pool:maxpool2dwithindices", "pool"),
                     "fc": ("∂loss/∂flat:view", "flat")}
    for module, (label, before) in expected_full.items():
        grad_input = args_of(event(cnn.walk, "full", "full_backward", module), "grad_input")
        assert labels(grad_input) == [label], module
        want = grads["images"] if before is None else plain.output_grad(before)
        assert_close(recorded(grad_input[0].value), want, f"full {module} grad_input[0]")


def test_two_inputs_model_labels() -> None:
    """The model's own legacy hook sits on its last op (the product): the gradients of the two
    factors; its full hook gives ∂loss/∂x and ∂loss/∂y, its forward's arguments."""
    walk = explained("two_inputs").walk
    plain = plain_run(pymodels.make_two_inputs, torch_inputs(*pymodels.TWO_INPUTS))
    legacy = args_of(event(walk, "legacy", "backward", ""), "grad_input")
    assert labels(legacy) == ["∂loss/∂left:addmm", "∂loss/∂right:addmm"]
    assert_close(recorded(legacy[0].value), plain.output_grad("left"), "∂loss/∂left:addmm")
    full = args_of(event(walk, "full", "full_backward", ""), "grad_input")
    assert labels(full) == ["∂loss/∂x", "∂loss/∂y"]
    for arg, tensor in zip(full, plain.inputs, strict=True):
        assert tensor.grad is not None
        assert_close(recorded(arg.value), tensor.grad, f"full <model> {arg.name}")


@pytest.mark.parametrize("loss", ["sum", "mean"])
@pytest.mark.parametrize("name", sorted(GOOD_MODELS))
def test_final_grads_equal_plain_backward(name: str, loss: str) -> None:
    make, shapes = GOOD_MODELS[name]
    walk = explained(name, loss).walk
    expected = plain_run(make, torch_inputs(*shapes), loss).grads(input_names(walk))
    for walk_pass in walk.passes:
        assert [grad.name for grad in walk_pass.grads] == list(expected)
        for grad in walk_pass.grads:
            assert grad.check is not None and grad.check.verified
            assert_close(recorded(grad.value), expected[grad.name],
                         f"[{walk_pass.mode}] {grad.name}.grad")


def test_mean_loss_seeds_backward_with_one_over_the_output_size() -> None:
    """`--loss mean` backpropagates output.mean(): ∂loss/∂output is 1/8 everywhere for (4, 2)."""
    walk = explained("mlp", "mean").walk
    grad_output = args_of(event(walk, "legacy", "backward", "head"), "grad_output")
    assert labels(grad_output) == ["∂loss/∂output"]
    assert_close(recorded(grad_output[0].value), torch.full((4, 2), 1 / 8), "∂loss/∂output")
