"""Python models: a deeper model (30 residual blocks), and values recorded as summaries (min,
max, mean, norm) above `--max-values` / `max_values=` (1,000 by default).

Torch is the oracle (tests/helpers/pyoracle.py): each test rebuilds the model with the same
factory under `torch.manual_seed(0)` and the same inputs, runs it in plain PyTorch, and compares.
The command line runs in-process through `gradexplain.cli.main`, the real entry point
(tests/helpers/pycli.py).
"""

from __future__ import annotations

import copy
import math

import pytest

from gradexplain.api import explain
from tests.helpers import pymodels
from tests.helpers.pycli import CLI, PYMODELS, json_event, walk_json
from tests.helpers.pyoracle import torch_inputs, torch_model
from tests.helpers.summaries import assert_summary_is_torchs


def test_thirty_blocks_walk_with_every_check_verified_and_summaries(cli: CLI) -> None:
    """30 residual blocks (91 modules): every check holds, and with `--max-values 4` each value
    of more than 4 elements is recorded as a summary (min, max, mean, norm), the rest in full."""
    doc = walk_json(cli, f"{PYMODELS}:make_deep", "--input", "3x4", "--max-values", "4")
    legacy_hooks = {item["target"] for item in doc["passes"][0]["events"]
                    if item["hook"] == "backward"}
    assert len(legacy_hooks) == 1 + pymodels.DEEP_BLOCKS * 3
    summaries = full = 0
    for walk_pass in doc["passes"]:
        for item in walk_pass["events"]:
            for arg in item["args"]:
                if arg.get("check") is not None:
                    assert arg["check"]["verified"], (item["seq"], arg)
                if "summary" not in arg and "value" not in arg:
                    continue  # a None argument
                if math.prod(arg["shape"]) > 4:
                    assert set(arg["summary"]) == {"min", "max", "mean", "norm"}
                    assert arg.get("value") is None
                    summaries += 1
                else:
                    assert arg.get("summary") is None and arg["value"] is not None
                    full += 1
    assert summaries > 1000 and full > 100


def test_explain_max_values_summarises_in_the_walk_data() -> None:
    model = torch_model(pymodels.make_deep)
    result = explain(model, pymodels.DEEP_INPUT, max_values=4)
    assert result.failures() == []
    values = [arg.value for walk_pass in result.walk.passes for item in walk_pass.events
              for arg in item.args if arg.value is not None]
    for value in values:
        if math.prod(value.shape) > 4:
            assert value.summary is not None and value.value is None
        else:
            assert value.summary is None and value.value is not None
    # a summary is the tensor's own: the input x (3x4) as torch computes it
    x = torch_inputs(pymodels.DEEP_INPUT)[0].double()
    first = next(arg.value for arg in result.walk.passes[0].events[0].args)
    assert first is not None and first.summary is not None
    assert (first.summary.min, first.summary.max) == (float(x.min()), float(x.max()))
    assert first.summary.mean == pytest.approx(float(x.mean()))
    assert first.summary.norm == pytest.approx(float(x.norm()))


def test_python_models_summarise_above_1000_values_by_default(cli: CLI) -> None:
    """400x3 inputs: x (1,200 values) and the (400, 4) activations (1,600) become summaries,
    the head's output (800 values) stays in full."""
    doc = walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "400x3")
    head = json_event(doc, "forward", "head")
    assert [("summary" in arg, arg["shape"]) for arg in head["args"]] == [
        (True, [400, 4]), (False, [400, 2])]
    encoder0 = json_event(doc, "forward", "encoder.0")
    assert [("summary" in arg, arg["shape"]) for arg in encoder0["args"]] == [
        (True, [400, 3]), (True, [400, 4])]


def test_a_weight_gradient_and_its_transpose_are_summarised_as_torch_computes_them() -> None:
    """The MLP's first Linear (3 to 4): its weight gradient comes to the legacy hook as a (3, 4)
    transpose (grad_input[2]) and to `.grad` as (4, 3), on the same memory. That argument, the
    post-accumulate hook's `.grad` and every weight's final `.grad`, each recorded as a summary
    (more than 4 values), against plain torch."""
    model = torch_model(pymodels.make_mlp)
    x = torch_inputs(pymodels.MLP_INPUT)[0]
    plain = copy.deepcopy(model)
    plain(x).sum().backward()
    weight_grad = plain.get_parameter("encoder.0.weight").grad
    assert weight_grad is not None
    result = explain(model, x, max_values=4)
    assert result.failures() == []
    legacy = result.walk.passes[0]
    transposed = [arg.value for item in legacy.events if item.hook == "backward"
                  and item.target == "encoder.0" for arg in item.args
                  if arg.name == "grad_input[2]"]
    accumulated = [arg.value for item in legacy.events if item.hook == "post_accumulate_grad"
                   and item.target == "encoder.0.weight" for arg in item.args]
    assert len(transposed) == 1 and len(accumulated) == 1
    assert_summary_is_torchs(transposed[0], weight_grad.t())
    assert_summary_is_torchs(accumulated[0], weight_grad)
    for walk_pass in result.walk.passes:
        finals = dict((grad.name, grad.value) for grad in walk_pass.grads)
        for name in ("encoder.0.weight", "encoder.2.weight", "head.weight"):
            grad = plain.get_parameter(name).grad
            assert grad is not None
            assert_summary_is_torchs(finals[name], grad)
