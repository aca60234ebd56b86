"""Python models on the command line: `FILE.py:factory`, `FILE.py:instance` and
`pkg.module:factory`, `--input` shapes and `--inputs` files, `--loss`, and `diff`, `report`,
`--save` and `--load` of a Python model.

Torch is the oracle (tests/helpers/pyoracle.py): each test rebuilds the model with the same
factory under `torch.manual_seed(0)` and the same inputs, runs it in plain PyTorch, and compares.
The command line runs in-process through `gradexplain.cli.main`, the real entry point
(tests/helpers/pycli.py); the few runs only a separate process can show run as subprocesses,
side by side with the rest of the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gradexplain.api import Explanation
from tests.helpers import pymodels
from tests.helpers.mdcheck import assert_markdown_well_formed
from tests.helpers.pycli import (
    CLI,
    PYMODELS,
    Background,
    json_event,
    started,
    walk_json,
    without_spec,
)
from tests.helpers.pyoracle import (
    assert_close,
    explained,
    plain_run,
    seeded,
    torch_inputs,
    torch_model,
)


@pytest.fixture(scope="module", autouse=True)
def processes() -> Iterator[Background]:
    yield from started("script")


@pytest.fixture(scope="module")
def mlp() -> Explanation:
    return explained("mlp")


def test_factory_instance_and_module_forms_agree(cli: CLI) -> None:
    """`file.py:factory`, `file.py:instance` and `pkg.module:factory` load the same model."""
    factory = walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3")
    instance = walk_json(cli, f"{PYMODELS}:MLP_INSTANCE", "--input", "4x3")
    module = walk_json(cli, "tests.helpers.pymodels:make_mlp", "--input", "4x3")
    assert instance["spec"] == f"{PYMODELS}:MLP_INSTANCE"
    assert module["spec"] == "tests.helpers.pymodels:make_mlp"
    assert without_spec(instance) == without_spec(factory) == without_spec(module)


def test_console_script_finds_a_package_in_the_working_directory(
        processes: Background) -> None:
    """The console script does not have the working directory on sys.path, yet
    `tests.helpers.pymodels:make_mlp` run from the repository root must import."""
    result = processes.result("script")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["passes"]


def test_input_shapes_are_seeded_randn_in_order(cli: CLI) -> None:
    """`--input 4x3 --input 4x5`: manual_seed(0), then randn(4, 3), then randn(4, 5)."""
    doc = walk_json(cli, f"{PYMODELS}:make_two_inputs", "--input", "4x3", "--input", "4x5")
    plain = plain_run(pymodels.make_two_inputs, torch_inputs(*pymodels.TWO_INPUTS))
    for name, grad in plain.grads(["x", "y"]).items():
        for walk_pass in doc["passes"]:
            got = torch.tensor(walk_pass["grads"][name], dtype=torch.float64)
            assert_close(got, grad, f"[{walk_pass['mode']}] {name}.grad")


def test_inputs_file_with_one_tensor_is_the_same_as_input(cli: CLI, tmp_path: Path) -> None:
    """A saved tensor equal to what `--input 4x3` draws gives the very same walk."""
    path = tmp_path / "x.pt"
    torch.save(torch_inputs(pymodels.MLP_INPUT)[0], path)
    from_file = walk_json(cli, f"{PYMODELS}:make_mlp", "--inputs", str(path))
    assert from_file == walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3")


def test_inputs_file_with_a_list_feeds_each_argument(cli: CLI, tmp_path: Path) -> None:
    with seeded(7):
        x, y = torch.randn(2, 3), torch.randn(2, 5)
    path = tmp_path / "xy.pt"
    torch.save([x, y], path)
    doc = walk_json(cli, f"{PYMODELS}:make_two_inputs", "--inputs", str(path))
    forward = json_event(doc, "forward_pre", "")
    assert [arg["value"] for arg in forward["args"]] == [x.tolist(), y.tolist()]
    plain = plain_run(pymodels.make_two_inputs, [x, y])
    for name, grad in plain.grads(["x", "y"]).items():
        got = torch.tensor(doc["passes"][1]["grads"][name], dtype=torch.float64)
        assert_close(got, grad, f"{name}.grad")


def test_loss_mean_on_the_command_line(cli: CLI) -> None:
    doc = walk_json(cli, f"{PYMODELS}:make_cnn", "--input", "2x1x6x6", "--loss", "mean")
    plain = plain_run(pymodels.make_cnn, torch_inputs(pymodels.CNN_INPUT), "mean")
    for name, grad in plain.grads(["images"]).items():
        got = torch.tensor(doc["passes"][0]["grads"][name], dtype=torch.float64)
        assert_close(got, grad, f"{name}.grad")
    summed = walk_json(cli, f"{PYMODELS}:make_cnn", "--input", "2x1x6x6")
    assert summed["passes"][0]["grads"] != doc["passes"][0]["grads"]


def test_diff_of_a_python_model(cli: CLI) -> None:
    result = cli("diff", f"{PYMODELS}:make_mlp", "--input", "4x3", "-f", "json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "gradexplain.diff/1"
    paths = {path for path, _ in torch_model(pymodels.make_mlp).named_modules()}
    assert {item["module"] for item in doc["modules"]} == paths
    text = cli("diff", f"{PYMODELS}:make_mlp", "--input", "4x3")
    assert text.code == 0, text.stderr
    assert "∂loss/∂head.bias" in text.stdout and "Traceback" not in text.stderr


def test_report_of_a_python_model(cli: CLI) -> None:
    result = cli("report", f"{PYMODELS}:make_cnn", "--input", "2x1x6x6")
    assert result.code == 0, result.stderr
    assert_markdown_well_formed(result.stdout)
    # The model section shows the command and print(model)
    assert f"gradexplain walk {PYMODELS}:make_cnn --input 2x1x6x6 --loss sum" in result.stdout
    assert repr(torch_model(pymodels.make_cnn)) in result.stdout


def test_save_then_load_renders_the_same(cli: CLI, tmp_path: Path) -> None:
    saved = tmp_path / "session.json"
    live = cli("walk", f"{PYMODELS}:make_mlp", "--input", "4x3", "--save", str(saved))
    assert live.code == 0, live.stderr
    assert cli("walk", "--load", str(saved)).stdout == live.stdout
    live_report = cli("report", f"{PYMODELS}:make_mlp", "--input", "4x3")
    assert cli("report", "--load", str(saved)).stdout == live_report.stdout


def test_explanation_save_loads_on_the_command_line(mlp: Explanation, cli: CLI,
                                                    tmp_path: Path) -> None:
    saved = tmp_path / "session.json"
    mlp.save(saved)
    loaded = cli("walk", "--load", str(saved), "-f", "json")
    assert loaded.code == 0, loaded.stderr
    assert json.loads(loaded.stdout) == mlp.json()
