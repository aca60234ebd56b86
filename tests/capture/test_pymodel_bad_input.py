"""Python models given bad input: exit 2, one line `error: ...`, no traceback; and explain()
refusing bad arguments.

The command line runs in-process through `gradexplain.cli.main`, the real entry point
(tests/helpers/pycli.py); the few runs only a separate process can show run as subprocesses,
side by side with the rest of the file.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from gradexplain.api import explain
from gradexplain.capture.pymodel import MAX_INPUT_ELEMENTS
from tests.helpers import pymodels
from tests.helpers.cli import run_cli
from tests.helpers.messages import raised_by
from tests.helpers.pycli import (
    CLI,
    PYMODELS,
    Background,
    assert_one_error_line,
    started,
)
from tests.helpers.pyoracle import torch_model


@pytest.fixture(scope="module", autouse=True)
def processes() -> Iterator[Background]:
    yield from started("forward_raises")


@dataclass(frozen=True)
class Bad:
    id: str
    args: tuple[str, ...]  # `{tmp}` stands for the test's temporary folder
    says: tuple[str, ...]


# What Python and torch themselves say for the two failures gradexplain passes on, asked of them
# here (their wording is theirs to change): the factory called without its argument, and the MLP
# (3 input features) run on 5 features.
NO_ARGUMENT_SAYS = raised_by(lambda: pymodels.make_sized())  # type: ignore[call-arg]
MLP_ON_5_FEATURES_SAYS = raised_by(lambda: torch_model(pymodels.make_mlp)(torch.randn(4, 5)))

# Elements in each of two (n, 3) tensors: within the bound alone, past it together.
HALF = 3 * (MAX_INPUT_ELEMENTS // 6 + 1)

BAD = [
    Bad("bare_file", ("walk", PYMODELS), ("is Python: name the model in it",
                                          f"{PYMODELS}:make_model")),
    Bad("nothing_after_the_colon", ("walk", f"{PYMODELS}:", "--input", "4x3"),
        ("names no model after the colon", f"{PYMODELS}:make_model")),
    Bad("not_a_name_after_the_colon", ("walk", f"{PYMODELS}:1x", "--input", "4x3"),
        ("'1x' is not a Python name", f"{PYMODELS}:make_model")),
    Bad("validate_of_a_python_model", ("validate", f"{PYMODELS}:make_mlp"),
        ("validate reads YAML specs", f"gradexplain walk {PYMODELS}:make_mlp --input")),
    Bad("missing_file", ("walk", "nowhere/models.py:make", "--input", "4x3"),
        ("nowhere/models.py: no such file",)),
    Bad("missing_attribute", ("walk", "{tmp}/few.py:make_modle", "--input", "4x3"),
        ("has no attribute 'make_modle'", "(it has: make_model, model)")),
    Bad("missing_module", ("walk", "tests.nowhere:make", "--input", "4x3"),
        ("tests.nowhere: cannot import it",)),
    Bad("factory_needs_arguments", ("walk", f"{PYMODELS}:make_sized", "--input", "4x3"),
        ("calling it with no arguments failed", NO_ARGUMENT_SAYS)),
    Bad("not_a_module", ("walk", f"{PYMODELS}:NOT_A_MODEL", "--input", "4x3"),
        ("NOT_A_MODEL", "not an nn.Module")),
    Bad("factory_returns_no_module", ("walk", f"{PYMODELS}:make_not_a_module", "--input", "4x3"),
        ("returned a dict, not an nn.Module",)),
    Bad("input_not_a_shape", ("walk", f"{PYMODELS}:make_mlp", "--input", "4xa"),
        ("--input '4xa'", "expected a shape such as 4x3")),
    Bad("input_zero_size", ("walk", f"{PYMODELS}:make_mlp", "--input", "0x3"),
        ("--input '0x3'", "positive sizes")),
    Bad("input_bad_dtype", ("walk", f"{PYMODELS}:make_mlp", "--input", "4x3:int8"),
        ("dtype 'int8' is not one of float32, float64, int64",)),
    Bad("too_few_inputs", ("walk", f"{PYMODELS}:make_two_inputs", "--input", "4x3"),
        ("its forward takes 2 input(s) (x, y), 1 given",)),
    Bad("no_inputs", ("walk", f"{PYMODELS}:make_mlp"), ("takes 1 input(s) (x), 0 given",)),
    Bad("forward_shape_mismatch", ("walk", f"{PYMODELS}:make_mlp", "--input", "4x5"),
        ("its forward raised RuntimeError on inputs of shape (4, 5): " + MLP_ON_5_FEATURES_SAYS,)),
    Bad("forward_raises_its_own_error", ("walk", f"{PYMODELS}:make_raises", "--input", "4x5"),
        ("its forward raised ValueError on inputs of shape (4, 5): expected 3 features, got 5",)),
    Bad("output_path_not_in_dict", ("walk", f"{PYMODELS}:make_returns_dict", "--input", "4x3",
                                    "--loss-of", "logit"),
        ("output path 'logit'", "has no 'logit', only logits",
         "the output's tensors are at logits")),
    Bad("output_path_malformed", ("walk", f"{PYMODELS}:make_returns_dict", "--input", "4x3",
                                  "--loss-of", "0..1"),
        ("--loss-of '0..1'", "expected a path such as 0, logits or 0.1")),
    Bad("output_path_with_yaml_spec", ("walk", "specs/two_modules.yaml", "--loss-of", "0"),
        ("--loss-of: only for a Python model",)),
    Bad("input_with_yaml_spec", ("walk", "specs/two_modules.yaml", "--input", "4x3"),
        ("--input: only for a Python model",)),
    Bad("input_and_inputs", ("walk", f"{PYMODELS}:make_mlp", "--input", "4x3", "--inputs",
                             "{tmp}/x.pt"), ("give --input shapes or --inputs FILE, not both",)),
    # Why a file does not load is read from the file, not from torch: its message advised
    # loading with weights_only off, which would run the file's code.
    Bad("inputs_not_a_tensor_file", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "README.md"),
        ("--inputs README.md: not a file torch.save wrote", "torch.save(x, path)")),
    Bad("inputs_an_empty_file", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/zero.pt"),
        ("zero.pt: the file is empty: save the inputs with torch.save",)),
    Bad("inputs_an_object", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/object.pt"),
        ("object.pt: it holds something other than tensors, which torch loads only by running "
         "code from the file (gradexplain never does)",)),
    Bad("inputs_a_plain_pickle", ("walk", f"{PYMODELS}:make_mlp", "--inputs",
                                  "{tmp}/pickled.pt"),
        ("pickled.pt: it holds something other than tensors",)),
    # Integer inputs to a model without parameters: nothing requires grad, and the message
    # named only frozen parameters and no_grad.
    Bad("inputs_integers_only", ("walk", "{tmp}/plain.py:make", "--inputs", "{tmp}/ids.pt"),
        ("the model's output does not require grad", "inputs integers or without grad")),
    Bad("inputs_cut_short", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/cut.pt"),
        ("cut.pt: torch could not read it as a file torch.save wrote (cut short or damaged?)",)),
    Bad("inputs_a_dict", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/dict.pt"),
        ("expected a tensor or a list of tensors, found a dict",)),
    Bad("inputs_an_empty_list", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/empty.pt"),
        ("the list in it is empty",)),
    Bad("inputs_a_list_with_a_number", ("walk", f"{PYMODELS}:make_mlp", "--inputs",
                                        "{tmp}/mixed.pt"),
        ("item 1 of the list in it is an int, not a tensor",)),
    Bad("inputs_missing", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/none.pt"),
        ("none.pt: no such file",)),
    Bad("inputs_nested", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/nested.pt"),
        ("nested.pt: the tensor is a nested tensor",)),
    Bad("inputs_quantized", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/quant.pt"),
        ("the tensor is a quantized tensor",)),
    Bad("inputs_sparse", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/sparse.pt"),
        ("tensor 1 of 2 is a sparse_coo tensor",)),
    Bad("inputs_meta", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/meta.pt"),
        ("the tensor is on the meta device",)),
    # A 1 kB file: an expanded view holds 3 * 10**9 elements in a storage of 3.
    Bad("inputs_expanded_past_the_bound", ("walk", f"{PYMODELS}:make_mlp", "--inputs",
                                           "{tmp}/expand.pt"),
        (f"the tensor has 3,000,000,000 elements, more than the {MAX_INPUT_ELEMENTS:,}",)),
    Bad("inputs_past_the_bound_together", ("walk", f"{PYMODELS}:make_mlp", "--inputs",
                                           "{tmp}/two_halves.pt"),
        (f"its 2 tensors together have {2 * HALF:,} elements, more than the "
         f"{MAX_INPUT_ELEMENTS:,}",)),
    Bad("inputs_many", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/many.pt"),
        ("on inputs of shape (4, 3), (4, 3), (4, 3), (4, 3) and 19,996 more (20,000 inputs)",)),
    Bad("load_with_input", ("walk", "--load", "{tmp}/x.pt", "--input", "4x3"),
        ("--load renders a saved session as it was captured: leave out --input",)),
    # only the exception's first line: the second ("and a second line") stays out
    Bad("import_raises", ("report", "{tmp}/broken.py:make", "--input", "4x3"),
        ("broken.py: running it raised ImportError: needs the flux capacitor",)),
]


@pytest.fixture
def bad_files(tmp_path: Path) -> Path:
    (tmp_path / "few.py").write_text(
        "from torch import nn\n\n\ndef make_model():\n    return nn.Linear(3, 2)\n\n\n"
        "model = make_model()\n_private = 1\n", encoding="utf-8")
    (tmp_path / "broken.py").write_text(
        "raise ImportError('needs the flux capacitor\\nand a second line')\n", encoding="utf-8")
    torch.save(torch.zeros(4, 3), tmp_path / "x.pt")
    (tmp_path / "zero.pt").write_bytes(b"")
    (tmp_path / "plain.py").write_text(
        "from torch import nn\n\n\ndef make():\n    return nn.Identity()\n", encoding="utf-8")
    torch.save(torch.arange(6).reshape(2, 3), tmp_path / "ids.pt")
    torch.save([torch.zeros(4, 3), Path("an object")], tmp_path / "object.pt")
    (tmp_path / "pickled.pt").write_bytes(pickle.dumps(Path("an object")))
    whole = (tmp_path / "x.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(whole[:len(whole) // 2])
    torch.save({"x": torch.zeros(4, 3)}, tmp_path / "dict.pt")
    torch.save([], tmp_path / "empty.pt")
    torch.save([torch.zeros(4, 3), 7], tmp_path / "mixed.pt")
    with warnings.catch_warnings():  # torch's on nested and quantized tensors, not ours
        warnings.simplefilter("ignore")
        torch.save(torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(3, 3)]),
                   tmp_path / "nested.pt")
        torch.save(torch.quantize_per_tensor(torch.zeros(4, 3), 0.1, 0, torch.quint8),
                   tmp_path / "quant.pt")
    torch.save([torch.zeros(4, 3), torch.zeros(4, 3).to_sparse()], tmp_path / "sparse.pt")
    torch.save(torch.zeros(4, 3, device="meta"), tmp_path / "meta.pt")
    torch.save(torch.zeros(1, 3).expand(10**9, 3), tmp_path / "expand.pt")
    torch.save([torch.zeros(1, 3).expand(HALF // 3, 3)] * 2, tmp_path / "two_halves.pt")
    torch.save([torch.zeros(4, 3)] * 20_000, tmp_path / "many.pt")
    return tmp_path


@pytest.mark.parametrize("case", BAD, ids=[case.id for case in BAD])
def test_bad_input_is_one_error_line(case: Bad, cli: CLI, bad_files: Path) -> None:
    result = cli(*(arg.replace("{tmp}", str(bad_files)) for arg in case.args))
    assert_one_error_line(result, case.says)


def test_bad_input_as_a_separate_process(processes: Background) -> None:
    """The same rule through a real process (nothing else on stderr, no traceback)."""
    assert_one_error_line(processes.result("forward_raises"),
                          ["its forward raised RuntimeError on inputs of shape (4, 5)"])


def test_warnings_torch_gives_while_loading_inputs_stay_out_of_stderr(tmp_path: Path) -> None:
    # A subprocess: torch warns once per process, and pytest records warnings in this one.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(torch.quantize_per_tensor(torch.zeros(4, 3), 0.1, 0, torch.quint8),
                   tmp_path / "quant.pt")
    result = run_cli("walk", f"{PYMODELS}:make_mlp", "--inputs", str(tmp_path / "quant.pt"))
    assert_one_error_line(result, ["quantized"])


def test_explain_rejects_bad_arguments() -> None:
    from gradexplain.errors import GradexplainError

    with pytest.raises(GradexplainError, match="input 0 is a str"):
        explain(pymodels.MLP_INSTANCE, "4x3")  # type: ignore[arg-type]
    with pytest.raises(GradexplainError, match="loss 'max'"):
        explain(pymodels.MLP_INSTANCE, pymodels.MLP_INPUT, loss="max")
    with pytest.raises(GradexplainError, match=r"takes 2 input\(s\) \(x, y\), 1 given"):
        explain(pymodels.make_two_inputs, (4, 3))
    with pytest.raises(GradexplainError, match="calling it with no arguments failed"):
        explain(pymodels.make_sized, (4, 3))


def test_a_python_name_outside_ascii_walks(tmp_path: Path) -> None:
    """Python takes `作る` and `modèle` as names (str.isidentifier); so does FILE.py:NAME, in the
    file's name too."""
    assert "作る".isidentifier() and "modèle".isidentifier()
    source = ("import torch\nfrom torch import nn\n\ndef 作る():\n    torch.manual_seed(0)\n"
              "    return nn.Linear(3, 2)\n\nmodèle = 作る\n")
    (tmp_path / "modèles_名前.py").write_text(source, encoding="utf-8")
    for name in ("作る", "modèle"):
        result = run_cli("walk", f"modèles_名前.py:{name}", "--input", "4x3", "--format", "json",
                         cwd=tmp_path)
        assert result.code == 0, result.stderr
        assert {"weight", "bias"} <= set(json.loads(result.stdout)["passes"][0]["grads"])


@pytest.mark.parametrize(("kind", "said"), [("folder", "is a folder"), ("fifo", "is a pipe")])
def test_a_model_file_that_is_no_regular_file_is_said_to_be_what_it_is(
        kind: str, said: str, tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    if kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)
    result = run_cli("walk", "model.py:make", "--input", "4x3", cwd=tmp_path)
    assert_one_error_line(result, [said])
    assert "no such file" not in result.stderr


def test_a_factory_that_is_async_is_one_line_without_pythons_warning(tmp_path: Path) -> None:
    """`async def make()` returns a coroutine, never run: one error line, and no
    "coroutine ... was never awaited" warning after it."""
    (tmp_path / "model.py").write_text("async def make():\n    return None\n")
    result = run_cli("walk", "model.py:make", "--input", "4x3", cwd=tmp_path)
    assert_one_error_line(result, ["returned a coroutine, not an nn.Module"])
    assert "never awaited" not in result.stderr


def test_a_factory_returning_none_says_none(tmp_path: Path) -> None:
    """It read "returned a NoneType"."""
    (tmp_path / "model.py").write_text("def make():\n    return None\n")
    result = run_cli("walk", "model.py:make", "--input", "4x3", cwd=tmp_path)
    assert_one_error_line(result, ["calling it returned None, not an nn.Module"])


def test_a_missing_name_lists_the_files_names_and_how_many_more(tmp_path: Path) -> None:
    """It listed the first 8 of a file's models and functions, without saying there were more."""
    (tmp_path / "model.py").write_text("".join(f"def make_{index}():\n    return None\n"
                                               for index in range(11)))
    result = run_cli("walk", "model.py:nosuch", "--input", "4x3", cwd=tmp_path)
    assert_one_error_line(result, ["has no attribute 'nosuch'", "make_0", ", and 3 more)"])
