"""Python models: names and reproducibility, and the user's model left as it was.

Tensors are named by module path and op, inputs by the forward's parameters; the same model
gives the same JSON from any process and from explain(); and explain() leaves the model, its
inputs and the caller's RNG as they were.

Torch is the oracle (tests/helpers/pyoracle.py): each test rebuilds the model with the same
factory under `torch.manual_seed(0)` and the same inputs, runs it in plain PyTorch, and compares.
The command line runs in-process through `gradexplain.cli.main`, the real entry point
(tests/helpers/pycli.py); the few runs only a separate process can show run as subprocesses,
side by side with the rest of the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import torch

import gradexplain
from gradexplain import api
from gradexplain.api import Explanation, explain
from gradexplain.render.console import plain_text
from tests.helpers import pymodels
from tests.helpers.mdcheck import assert_markdown_well_formed
from tests.helpers.pycli import (
    CLI,
    PYMODELS,
    Background,
    started,
    walk_json,
    without_spec,
)
from tests.helpers.pyoracle import explained, input_names, seeded, torch_inputs, torch_model


@pytest.fixture(scope="module", autouse=True)
def processes() -> Iterator[Background]:
    yield from started("script", "module", "import")


@pytest.fixture(scope="module")
def mlp() -> Explanation:
    return explained("mlp")


@pytest.fixture(scope="module")
def cnn() -> Explanation:
    return explained("cnn")


# === names and reproducibility ===================================================================


def tensor_names(result: Explanation, mode: str) -> set[str]:
    trace = result.session.trace(mode)
    assert trace is not None
    return {name for record in trace.tensors for name in record.names}


def test_tensors_are_named_by_module_path_and_op(mlp: Explanation, cnn: Explanation) -> None:
    """Module outputs are `path:op`, inputs the forward's parameter names, parameters their
    `named_parameters()` names, and `output` and `loss` the model's result and the scalar."""
    for mode in ("legacy", "full"):
        assert tensor_names(mlp, mode) >= {
            "x", "encoder.0:addmm", "encoder.1:relu", "encoder.2:addmm", "encoder.3:tanh",
            "encoder:tanh", "head:addmm", "output", "loss", "encoder.0.weight", "head.bias"}
        assert tensor_names(cnn, mode) >= {
            "images", "conv:convolution", "act:relu", "pool:maxpool2dwithindices",
            "flat:view", "fc:addmm", "output", "loss", "conv.weight", "fc.bias"}


def test_both_passes_name_the_same_tensors(mlp: Explanation, cnn: Explanation) -> None:
    """Full hooks wrap module outputs in new tensors; the names must not depend on that."""
    for result in (mlp, cnn):
        assert tensor_names(result, "legacy") == tensor_names(result, "full")


def test_inputs_are_named_by_the_forwards_parameters() -> None:
    assert input_names(explained("two_inputs").walk) == ["x", "y"]
    assert input_names(explained("cnn").walk) == ["images"]
    # nn.Sequential's forward calls its argument `input`
    deep = explain(torch_model(pymodels.make_deep), pymodels.DEEP_INPUT)
    assert input_names(deep.walk) == ["input"]


def test_labels_show_whole_names(mlp: Explanation) -> None:
    """`∂loss/∂head.weight`, never `∂loss/∂weight`: a Python model has many `weight`s."""
    texts = {arg.meaning.text for walk_pass in mlp.walk.passes for item in walk_pass.events
             for arg in item.args if arg.meaning is not None}
    assert "∂loss/∂head.weight" in texts and "∂loss/∂encoder.0.weight" in texts
    assert not {"∂loss/∂weight", "∂loss/∂bias"} & texts


def test_json_is_byte_identical_across_processes(processes: Background) -> None:
    """Two processes (each with its own hash seed, so also its own name for the imported user
    module) print the same bytes."""
    first, second = processes.result("script"), processes.result("module")
    assert first.code == 0, first.stderr
    assert first.stdout == second.stdout
    assert json.loads(first.stdout)["spec"] == "tests.helpers.pymodels:make_mlp"


def test_command_line_and_explain_agree(cli: CLI, processes: Background) -> None:
    """Same model, same inputs: the CLI (in this process and as a separate one) and explain()
    give the same JSON. Only `spec` differs: the CLI has the target as typed, explain() the
    model's name (the factory's, the class's, or `name=`) followed by ` (Python)`."""
    here = walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3")
    assert here["spec"] == f"{PYMODELS}:make_mlp"
    assert processes.result("module").code == 0, processes.result("module").stderr
    elsewhere = json.loads(processes.result("module").stdout)
    assert elsewhere["spec"] == "tests.helpers.pymodels:make_mlp"
    assert without_spec(elsewhere) == without_spec(here)

    from_instance = explain(pymodels.MLP_INSTANCE, pymodels.MLP_INPUT).json()
    assert from_instance["spec"] == "MLP (Python)"
    assert without_spec(from_instance) == without_spec(here)
    with seeded():  # the CLI calls the factory under manual_seed(0); explain() does not
        from_factory = explain(pymodels.make_mlp, pymodels.MLP_INPUT).json()
    assert from_factory["spec"] == "make_mlp (Python)"
    assert without_spec(from_factory) == without_spec(here)
    named = explain(pymodels.MLP_INSTANCE, pymodels.MLP_INPUT, name="clf").json()
    assert named["spec"] == "clf (Python)"


def test_explanation_renders_like_the_command_line(cli: CLI, mlp: Explanation) -> None:
    markdown = cli("walk", f"{PYMODELS}:make_mlp", "--input", "4x3", "-f", "markdown")
    assert markdown.code == 0, markdown.stderr
    # The title and the `about` line name the model (the target as typed, or "MLP (Python)");
    # everything after them is the same.
    api_lines, cli_lines = mlp.markdown().splitlines(), markdown.stdout.splitlines()
    assert cli_lines[2] == (f"MLP from {PYMODELS}:make_mlp: loss = sum(output), "
                            "backpropagated with loss.backward()")
    assert api_lines[2] == "MLP from MLP (Python): loss = sum(output), backpropagated with " \
                           "loss.backward()"
    assert api_lines[3:] == cli_lines[3:]
    assert_markdown_well_formed(mlp.report())
    assert "∂loss/∂head.bias" in plain_text(mlp.text())


def test_explain_is_the_packages_own(processes: Background) -> None:
    """`from gradexplain import explain` is the API function. (It was once shadowed by a
    submodule `gradexplain/explain.py`, since renamed torch_errors.py.)"""
    exported: object = gradexplain.explain
    assert exported is api.explain and gradexplain.Explanation is api.Explanation
    fresh = processes.result("import")
    assert fresh.code == 0, fresh.stderr
    assert fresh.stdout == "gradexplain.api explain gradexplain.api\n"


# === the user's model is left as it was ==========================================================


def test_explain_leaves_the_model_and_inputs_untouched() -> None:
    model = torch_model(pymodels.make_mlp)
    x = torch_inputs(pymodels.MLP_INPUT)[0]
    state = {name: value.clone() for name, value in model.state_dict().items()}
    x_before = x.clone()
    rng = torch.get_rng_state()

    result = explain(model, x)

    assert result.failures() == []
    for path, module in model.named_modules():
        for hooks in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                      "_backward_pre_hooks"):
            assert not getattr(module, hooks), f"{path or '<model>'}.{hooks} left behind"
        assert module.training
    for name, param in model.named_parameters():
        assert param.grad is None, f"{name}.grad set"
        assert param.requires_grad
        assert not param._backward_hooks, f"tensor hook left on {name}"
        assert torch.equal(param, state[name]), f"{name} changed"
    assert not x.requires_grad and x.grad is None and torch.equal(x, x_before)
    assert torch.equal(rng, torch.get_rng_state()), "explain() moved the caller's RNG"
    # ... and running it again gives the same walk: nothing stuck to the model in between.
    assert explain(model, x).json() == result.json()
