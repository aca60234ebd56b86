"""What the fuzzer (tests/test_fuzz.py) found, each kept as a plain test of the fix: files that
gave an internal error, a two-line or endless error, a false ✗, or a validate that took hours.

Each bad file must give exit 2 and one short line that says what is wrong, through the real
command line in a subprocess; the two runs that are right to succeed are checked against torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.helpers.cli import SPECS, run_cli

HEAD = "inputs: {x: {value: 1.0, requires_grad: true}}\n"
TAIL = "forward: ['y = x * 2']\nbackward: y\n"


@dataclass(frozen=True)
class Finding:
    id: str
    text: str
    says: tuple[str, ...]
    command: str = "validate"


FINDINGS = [
    # Explicit tags on text that does not fit them: the loader's own errors escaped.
    Finding("int_tag_on_text", 'seed: !!int "abc"\n' + HEAD + TAIL,
            ("1:7", "'abc' cannot be read as a whole number")),
    Finding("bool_tag_on_text", 'seed: !!bool "maybe"\n' + HEAD + TAIL,
            ("'maybe' cannot be read as true or false",)),
    Finding("float_tag_on_empty_text", 'seed: !!float ""\n' + HEAD + TAIL,
            ("'' cannot be read as a number",)),
    # Python refuses to read integers of over 4,300 digits.
    Finding("integer_of_5000_digits", "seed: " + "1" * 5000 + "\n" + HEAD + TAIL,
            ("cannot be read as a whole number",)),
    Finding("number_too_large_for_float32",
            "inputs: {x: {value: 1" + "0" * 400 + ", requires_grad: true}}\n" + TAIL,
            ("a 401-digit number is too large", "3.4e38")),
    Finding("float_that_becomes_inf", "inputs: {x: {value: [1.0e+300], requires_grad: true}}\n"
            "forward: ['y = sum(x * x)']\nbackward: y\n", ("the number 1e+300 is too large",)),
    Finding("whole_number_too_large_for_int64",
            "inputs:\n  idx: {value: [1, 3, 1.0e+30], dtype: int64}\n"
            "layers:\n  emb: {Embedding: {num_embeddings: 5, embedding_dim: 3}}\n"
            "forward: ['e = emb(idx)', 'loss = sum(e)']\nbackward: loss\n",
            ("2:", "int64 tensor holds whole numbers below 2**63",)),
    Finding("huge_literal_in_a_step", HEAD + "forward: ['y = x * " + "1" * 41 + "']\n"
            "backward: y\n", ("a 41-digit number is too large",)),
    Finding("inf_literal_in_a_step", HEAD + "forward: ['y = x * 1e999']\nbackward: y\n",
            ("the number inf is too large",)),
    # A control character anywhere in the file: the reader raised before the loader's guard.
    Finding("control_character", 'forward: ["y = x"]\x01\n', ("1:19", "U+0001 is not allowed")),
    Finding("nul_character", HEAD + 'forward: ["y = x\x00"]\nbackward: y\n',
            ("U+0000 is not allowed",)),
    # An escape for half a surrogate pair: validate said ok, then printing the name failed.
    # libyaml refuses the escape in its own words, PyYAML's pure-Python loader reads it and we
    # refuse the half character (test_lone_surrogate_with_the_pure_python_loader): either way one
    # line on line 1 (write_spec's file is spec.yaml).
    Finding("lone_surrogate_as_value", 'name: "\\ud800"\n' + HEAD + TAIL, ("spec.yaml:1:",)),
    Finding("lone_surrogate_as_key", '"\\udfff": 1\n' + HEAD + TAIL, ("spec.yaml:1:",)),
    # A key with a newline made the error two lines.
    Finding("newline_in_a_key", 'inputs:\n  "x\\ny": 1.0\n' + TAIL, ("['x\\ny']",)),
    # backward of a leaf: validate said ok, walk said the check run built another graph.
    Finding("backward_of_an_input", HEAD + "forward: ['y = x * 2']\nbackward: x\n",
            ("backward names 'x', a leaf tensor",), "walk"),
    Finding("backward_of_a_renamed_input", HEAD + "forward: ['y = x']\nbackward: y\n",
            ("backward names 'y', a leaf tensor",)),
    Finding("grad_of_an_input", HEAD + "forward: ['y = x * 2']\ngrad: [{of: x, wrt: x}]\n",
            ("grad `of` names 'x', a leaf tensor",)),
    # Python ints a step builds from numbers alone: 2 ** 1000 is no tensor torch can use. Walk
    # once ran it and passed on torch's refusal; the checker now folds it, within the literals'
    # bound (issue 19).
    Finding("huge_power_at_run_time", "inputs: {x: {value: [1.0, 2.0], requires_grad: true}}\n"
            "forward: ['y = sum(x ** 2 ** 1000)']\nbackward: y\n",
            ("2:", "in step 'y = sum(x ** 2 ** 1000)': 2 ** 1000 is too large", "3.4e38"),
            "walk"),
    # User text quoted whole in a message: a 500-character layer class (found by the fuzzer
    # under another hypothesis release), key, dtype, hook, action, step or top-level scalar.
    Finding("long_unknown_layer", HEAD + "layers:\n  open: " + "L" * 500 + "\n" + TAIL,
            ("unknown layer 'LLLL", "...'",)),
    Finding("long_unknown_key", HEAD + "K" * 500 + ": 1\n" + TAIL, ("unknown key 'KKKK", "...'")),
    Finding("long_unknown_dtype", "dtype: " + "d" * 500 + "\n" + HEAD + TAIL,
            ("unknown dtype 'dddd", "...'")),
    Finding("long_unknown_hook", HEAD + TAIL + "interventions:\n  - {hook: " + "h" * 500
            + ", on: '', action: zero}\n", ("unknown hook 'hhhh", "...'")),
    Finding("long_unknown_action", HEAD + TAIL + "interventions:\n  - {hook: backward, on: '', "
            "action: " + "a" * 500 + "}\n", ("unknown action 'aaaa", "...'")),
    Finding("long_step_without_assignment", HEAD + "forward: ['" + "x + " * 120 + "x']\n"
            "backward: y\n", ("a step is `name = expression`, got 'x + x", "...'")),
    Finding("long_top_level_scalar", "s" * 500 + "\n", ("the scalar 'ssss", "...'")),
    # Limits said "schema error" and gave no way out.
    Finding("step_too_long", HEAD + "forward: ['y = " + " + ".join(["x"] * 400) + "']\n"
            "backward: y\n", ("too large", "the step has 1,601 characters", "split it")),
]


@pytest.mark.parametrize("finding", FINDINGS, ids=[item.id for item in FINDINGS])
def test_finding_is_one_clear_line(finding: Finding, write_spec: Callable[[str], Path]) -> None:
    path = write_spec(finding.text)
    result = run_cli(finding.command, str(path))
    assert result.code == 2, result
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {path}")
    assert len(lines[0]) - len(str(path)) <= 400, lines[0]
    for fragment in finding.says:
        assert fragment in lines[0], (fragment, lines[0])


def test_long_lists_of_names_are_cut(write_spec: Callable[[str], Path]) -> None:
    # An unknown name listed every name defined so far: 1,839 characters with 300 steps.
    steps = [f"s{i} = x * {i}" for i in range(300)] + ["y = nosuch(s299)"]
    path = write_spec(HEAD + "forward: [" + ", ".join(f"'{step}'" for step in steps) + "]\n"
                      "backward: y\n")
    result = run_cli("validate", str(path))
    assert result.code == 2
    assert "unknown function, layer or module 'nosuch'" in result.stderr
    assert "and 289 more" in result.stderr  # x and s0..s10 shown, of 301
    assert len(result.stderr) < 400


def test_deeply_nested_calls_validate_in_linear_time(write_spec: Callable[[str], Path]) -> None:
    # Each level inferred its argument twice: 20 levels took 5 s, 31 would take hours (past the
    # subprocess timeout of run_cli, so a regression fails here rather than hangs).
    path = write_spec(HEAD + "forward: ['y = " + "sigmoid(" * 31 + "x" + ")" * 31 + "']\n"
                      "backward: y\n")
    result = run_cli("validate", str(path))
    assert result.code == 0, result.stderr
    assert "1 step" in result.stdout


def test_inf_and_nan_gradients_are_checked_not_failed(write_spec: Callable[[str], Path]) -> None:
    # d(sum(log(x) * 0))/dx at x = 0 is 0 * (1/0) = nan: the check compared nan with nan and
    # said ✗ FAILED. The label is right when its value equals torch's, nan where torch has nan.
    path = write_spec("inputs:\n  x: {value: [1.0, 0.0], requires_grad: true}\n"
                      "forward: ['y = log(x)', 'z = sum(y * 0)']\nbackward: z\n")
    result = run_cli("walk", str(path), "--format", "json")
    assert result.code == 0, result.stderr
    x = torch.tensor([1.0, 0.0], requires_grad=True)
    (torch.log(x) * 0).sum().backward()
    assert x.grad is not None
    expected = x.grad.tolist()
    assert expected[0] == 0.0 and expected[1] != expected[1]  # the premise: [0, nan]
    document = json.loads(result.stdout)
    # JSON has no nan: the walk writes null there.
    assert document["passes"][0]["grads"]["x"] == [0.0, None]
    assert "FAILED" not in run_cli("walk", str(path)).stdout


def test_lone_surrogate_with_the_pure_python_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without libyaml, PyYAML's own loader reads "\ud800" as half a character; validate said
    # ok, then printing the name failed.
    import yaml

    from gradexplain.errors import SpecSchemaError
    from gradexplain.language import load_spec_text, yamlio

    monkeypatch.setattr(yamlio, "_Loader", yaml.SafeLoader)
    for text in ('name: "\\ud800"\n' + HEAD + TAIL, '"\\udfff": 1\n' + HEAD + TAIL):
        with pytest.raises(SpecSchemaError, match="half of a UTF-16 surrogate pair"):
            load_spec_text(text, "spec.yaml")


def test_long_names_do_not_make_a_long_error(write_spec: Callable[[str], Path]) -> None:
    # A 300-character name was quoted whole by every message that names it.
    long_name = "a" * 300
    path = write_spec(f"inputs:\n  {long_name}: {{value: 1.0, requires_grad: true}}\n"
                      f"forward: ['y = nosuch({long_name})']\nbackward: y\n")
    result = run_cli("validate", str(path))
    assert result.code == 2
    assert "input 'aaaaaaaaaaaaaaaaaaaa...' has 300 characters; a name is at most 64" in (
        result.stderr)
    assert len(result.stderr) < 400
    # Names at the bound, listed: the list stops at 120 characters.
    names = [f"{letter * 64}" for letter in "bcdefg"]
    path = write_spec("inputs:\n" + "".join(f"  {name}: {{value: 1.0, requires_grad: true}}\n"
                                             for name in names)
                      + f"forward: ['y = nosuch({names[0]})']\nbackward: y\n")
    result = run_cli("validate", str(path))
    assert result.code == 2
    assert f"at this point: {names[0]} and 5 more)" in result.stderr
    assert len(result.stderr) < 400


def spec_variant(tmp_path: Path, spec: str, old: str, new: str) -> Path:
    """An example spec with `old` (which must be in it) replaced by `new`, written to a file."""
    text = (SPECS / spec).read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "spec.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_an_intervention_check_with_inf_gradients(tmp_path: Path) -> None:
    # A parameter at float32's largest value makes some gradients inf: the intervention's own
    # check (with = without + the replacement's share) compared inf with inf and said ✗.
    path = spec_variant(tmp_path, "intervene_legacy.yaml", "params: {p: [3.0, 4.0]}",
                        "params: {p: [3.4e+38, 4.0]}")
    result = run_cli("walk", str(path), "--timeline")
    assert result.code == 0, result.stdout[-2000:]
    assert "inf" in result.stdout  # the premise: the run really met infinities (forward values)
    assert "FAILED" not in result.stdout


def test_intervention_on_a_module_with_an_unused_argument(tmp_path: Path) -> None:
    # The full hook's wrapper hands a tensor hook on the unused argument None: the intervention
    # runs recorded grad.detach() and crashed (internal error).
    path = spec_variant(tmp_path, "mul_param.yaml", '"h = x1 * x2"', '"h = x2 * x2"')
    assert "interventions:" in path.read_text(encoding="utf-8")
    result = run_cli("walk", str(path))
    assert result.code == 0, result.stderr + result.stdout[-2000:]
    assert "internal error" not in result.stderr
    assert "FAILED" not in result.stdout


def test_an_intervention_check_at_float32_extremes(tmp_path: Path) -> None:
    # W = 1e30: the intervention's check adds the run without it and the replacement's share,
    # terms of 1e30 whose float32 rounding swamps a result near 1. The tolerance is relative to
    # the terms, not only to their sum.
    path = spec_variant(tmp_path, "mul_param.yaml", "params: {W: [5.0]}",
                        "params: {W: [1.0e+30]}")
    result = run_cli("walk", str(path))
    assert result.code == 0, result.stdout[-2000:]
    assert "FAILED" not in result.stdout
