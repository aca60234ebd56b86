"""`gradexplain diff`: legacy and full hook calls paired per module call, with the reasons they
differ. The hooks' values are compared with the same hooks registered on plain PyTorch modules
written here; the reasons are checked against what each case is known to do (the facts file)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.analysis.diff import compare
from gradexplain.capture.pipeline import capture
from gradexplain.language import load_spec
from gradexplain.records.diff import CallDiff, HookDiff, ModuleDiff
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import LabelledArg
from tests.helpers.articles import TwoModules
from tests.helpers.capture import captured
from tests.helpers.cli import run_cli
from tests.helpers.spectexts import TWICE, TWICE_SPEC

Hooked = dict[str, list[tuple[tuple[Any, ...], tuple[Any, ...]]]]


def diff_of(text: str, tmp_path: Path, name: str = "case.yaml") -> HookDiff:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return compare(capture(load_spec(path), str(path), text))


def module_of(diff: HookDiff, module: str) -> ModuleDiff:
    found = [item for item in diff.modules if item.module == module]
    assert len(found) == 1, [item.module for item in diff.modules]
    return found[0]


def only_call(module: ModuleDiff) -> CallDiff:
    assert len(module.calls) == 1
    return module.calls[0]


def row(call: CallDiff, name: str) -> tuple[LabelledArg | None, LabelledArg | None, bool]:
    found = [item for item in call.rows if item.name == name]
    assert len(found) == 1, [item.name for item in call.rows]
    return found[0].legacy, found[0].full, found[0].same


def tensor(arg: LabelledArg | None) -> torch.Tensor:
    assert arg is not None and arg.value is not None
    value: TensorValue = arg.value
    return torch.tensor(value.value, dtype=torch.float64)


def close(arg: LabelledArg | None, expected: torch.Tensor) -> bool:
    got = tensor(arg)
    return got.shape == expected.shape and torch.allclose(got, expected.double(), atol=1e-6)


def kinds(module: ModuleDiff) -> set[str]:
    return {finding.kind for finding in module.findings()}


def hooked(model: nn.Module, names: list[str], full: bool,
           run: Callable[[], torch.Tensor]) -> Hooked:
    """Register legacy or full backward hooks on the named submodules of a plain torch model,
    run forward and backward, and return each module's hook calls in firing order."""
    calls: Hooked = {name: [] for name in names}
    handles = []
    for name in names:
        module = model.get_submodule(name) if name else model

        def hook(_: nn.Module, grad_input: Any, grad_output: Any, name: str = name) -> None:
            calls[name].append((tuple(grad_input), tuple(grad_output)))

        register = module.register_full_backward_hook if full else module.register_backward_hook
        handles.append(register(hook))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run().backward()
    for handle in handles:
        handle.remove()
    return calls


def two_modules_calls(full: bool) -> Hooked:
    model = TwoModules()
    x = torch.tensor(5.0, requires_grad=True)
    return hooked(model, ["", "module", "module2", "module2.l", "module2.activation"], full,
                  lambda: model(x).sum())


def test_classic_module2_legacy_sees_t_full_sees_y() -> None:
    diff = compare(captured("two_modules.yaml"))
    legacy_calls, full_calls = two_modules_calls(False), two_modules_calls(True)
    module2 = module_of(diff, "module2")
    legacy, full, same = row(only_call(module2), "grad_input[0]")
    assert not same
    assert close(legacy, legacy_calls["module2"][0][0][0])  # dz/dt, the Sigmoid's input
    assert close(full, full_calls["module2"][0][0][0])      # dz/dy, module2's argument
    assert legacy is not None and legacy.meaning is not None and legacy.meaning.wrt == "module2.t"
    assert full is not None and full.meaning is not None and full.meaning.wrt == "y"
    assert module2.last_node == "SigmoidBackward0"
    assert {"attach", "extra", "unseen"} <= kinds(module2)
    assert module2.verdict.startswith("legacy grad_input is ∂z/∂t, the input of the last op "
                                      "Sigmoid, not ∂z/∂y, module2's input: use "
                                      "register_full_backward_hook")
    assert "tensor hook on t" in module2.verdict


def test_classic_module_legacy_order_follows_p_times_x() -> None:
    diff = compare(captured("two_modules.yaml"))
    legacy_calls, full_calls = two_modules_calls(False), two_modules_calls(True)
    module = module_of(diff, "module")
    call = only_call(module)
    first, full_first, _ = row(call, "grad_input[0]")
    second, full_second, _ = row(call, "grad_input[1]")
    assert close(first, legacy_calls["module"][0][0][0])   # dz/dp
    assert close(second, legacy_calls["module"][0][0][1])  # dz/dx
    assert close(full_first, full_calls["module"][0][0][0])
    assert full_second is None  # full has one entry per module argument
    assert len(full_calls["module"][0][0]) == 1
    assert {"extra", "order"} <= kinds(module)
    texts = " ".join(finding.text for finding in module.findings())
    assert "parameter p" in texts and "`y = p * x`" in texts


def test_where_the_last_op_takes_the_module_arguments_both_agree() -> None:
    diff = compare(captured("two_modules.yaml"))
    activation = module_of(diff, "module2.activation")
    assert all(item.same for item in only_call(activation).rows)
    assert activation.verdict.startswith("legacy and full agree")
    assert kinds(activation) == {"attach"}


LOST = """
inputs:
  x: {value: [0.5, 2.0], requires_grad: true}
layers:
  ident: Identity
modules:
  two:
    forward: {args: [h], steps: ["a = h * 2", "b = exp(h)"], returns: [a, b]}
forward: ["y = ident(x)", "p, q = two(y)", "s = sum(q * 3)"]
backward: s
"""


class Two(nn.Module):
    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return h * 2, torch.exp(h)


def lost_calls(full: bool) -> Hooked:
    ident, two = nn.Identity(), Two()
    model = nn.ModuleDict({"ident": ident, "two": two})
    x = torch.tensor([0.5, 2.0], requires_grad=True)

    def run() -> torch.Tensor:
        _, q = two(ident(x))
        loss: torch.Tensor = (q * 3).sum()
        return loss

    return hooked(model, ["ident", "two"], full, run)


def test_legacy_never_fires_on_an_identity_of_a_leaf_or_an_unused_first_output(
        tmp_path: Path) -> None:
    diff = diff_of(LOST, tmp_path)
    legacy_calls, full_calls = lost_calls(False), lost_calls(True)
    assert legacy_calls == {"ident": [], "two": []}  # plain torch: neither legacy hook fires
    for name, reason in (("ident", "has no grad_fn"), ("two", "only a later output is used")):
        module = module_of(diff, name)
        call = only_call(module)
        assert call.legacy_seq is None and call.full_seq is not None
        legacy, full, same = row(call, "grad_input[0]")
        assert legacy is None and not same
        assert close(full, full_calls[name][0][0][0])
        assert "never_fires" in kinds(module)
        assert reason in module.verdict
        assert module.verdict.endswith("use register_full_backward_hook")
    two = only_call(module_of(diff, "two"))
    _, unused, _ = row(two, "grad_output[0]")
    assert unused is not None and unused.value is None
    assert full_calls["two"][0][1][0] is None


GATE = """
inputs:
  a: {value: [1.0, -2.0], requires_grad: true}
  k: [0.5, 3.0]
modules:
  gate:
    forward: {args: [h, g], steps: ["o = h * g"]}
forward: ["w = gate(a, k)", "s = sum(w * w)"]
backward: s
"""


class Gate(nn.Module):
    def forward(self, h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return h * g


def test_full_gives_zeros_for_an_input_without_grad_legacy_gives_none(tmp_path: Path) -> None:
    module = module_of(diff_of(GATE, tmp_path), "gate")

    def gate_calls(full: bool) -> Hooked:
        # A fresh model per kind: torch refuses legacy and full hooks on one module, ever.
        gate = Gate()
        model = nn.ModuleDict({"gate": gate})
        a = torch.tensor([1.0, -2.0], requires_grad=True)
        k = torch.tensor([0.5, 3.0])

        def run() -> torch.Tensor:
            w = gate(a, k)
            loss: torch.Tensor = (w * w).sum()
            return loss

        return hooked(model, ["gate"], full, run)

    legacy_calls, full_calls = gate_calls(False), gate_calls(True)
    legacy, full, _ = row(only_call(module), "grad_input[1]")
    assert legacy is not None and legacy.value is None and legacy_calls["gate"][0][0][1] is None
    assert close(full, full_calls["gate"][0][0][1])
    assert torch.count_nonzero(full_calls["gate"][0][0][1]) == 0
    assert {"zeros", "none"} <= kinds(module)
    zeros = next(item.text for item in module.findings() if item.kind == "zeros")
    assert "k does not require grad" in zeros


def test_each_call_of_a_module_called_twice_is_paired_with_its_own(tmp_path: Path) -> None:
    module = module_of(diff_of(TWICE_SPEC, tmp_path), "blk")
    assert sorted(call.ordinal for call in module.calls) == [1, 2]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.tensor(TWICE["blk.w"]))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return torch.tanh(h) * self.w

    def block_calls(full: bool) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        block = Block()
        model = nn.ModuleDict({"blk": block})
        v = torch.tensor(TWICE["v"], requires_grad=True)
        d = torch.tensor(TWICE["d"])

        def run() -> torch.Tensor:
            loss: torch.Tensor = (block(block(v)) * d).sum()
            return loss

        # Backward reaches the second call first: the hook calls come in reverse call order.
        return hooked(model, ["blk"], full, run)["blk"][::-1]

    full_calls, legacy_calls = block_calls(True), block_calls(False)
    for call in module.calls:
        legacy, full, _ = row(call, "grad_input[0]")
        assert close(full, full_calls[call.ordinal - 1][0][0])
        assert close(legacy, legacy_calls[call.ordinal - 1][0][0])
    assert "partial" in kinds(module)


def test_diff_json_is_the_same_alignment_as_data() -> None:
    result = run_cli("diff", "specs/two_modules.yaml", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "gradexplain.diff/1"
    modules = {item["module"]: item for item in document["modules"]}
    assert set(modules) == {"", "module", "module2", "module2.l", "module2.activation"}
    rows = {item["name"]: item for item in modules["module2"]["calls"][0]["rows"]}
    legacy, full = rows["grad_input[0]"]["legacy"], rows["grad_input[0]"]["full"]
    expected_legacy = two_modules_calls(False)["module2"][0][0][0]
    expected_full = two_modules_calls(True)["module2"][0][0][0]
    assert torch.allclose(torch.tensor(legacy["value"]), expected_legacy)
    assert torch.allclose(torch.tensor(full["value"]), expected_full)
    assert legacy["meaning"]["wrt"] == "module2.t" and full["meaning"]["wrt"] == "y"
    assert rows["grad_input[0]"]["same"] is False and rows["grad_output[0]"]["same"] is True
    assert {item["kind"] for item in modules["module2"]["findings"]} >= {"extra", "unseen"}
    assert modules["module2"]["legacy_node"] == "SigmoidBackward0"


def test_diff_text_pipes_at_100_columns_with_a_verdict_per_module() -> None:
    result = run_cli("diff", "specs/two_modules.yaml")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line) <= 100 and line == line.rstrip() for line in lines)
    assert sum(line.startswith("  verdict: ") for line in lines) == 5
    assert "\x1b[" not in result.stdout


@pytest.mark.parametrize("args, message", [
    (("diff",), "give a SPEC to run, or --load FILE"),
    (("diff", "specs/two_modules.yaml", "--module", "nope"), "--module 'nope': no such module"),
    (("diff", "--load", "missing.json"), "missing.json: not a usable gradexplain session"),
])
def test_diff_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    result = run_cli(*args)
    assert result.code == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("module", ["module", "module2"])
def test_module_filter_keeps_the_module_and_its_submodules_only(module: str) -> None:
    """`--module module` keeps neither module2 nor its children (a prefix is not a path), and
    walk and diff keep the same modules: those the trace's calls have under that path."""
    legacy = captured("two_modules.yaml").trace("legacy")
    assert legacy is not None
    parts = module.split(".")
    expected = sorted({call.module for call in legacy.calls
                       if call.module.split(".")[:len(parts)] == parts})
    assert expected and (module != "module" or expected == ["module"])
    diff = run_cli("diff", "specs/two_modules.yaml", "--module", module, "--format", "json")
    assert diff.code == 0, diff.stderr
    assert sorted(item["module"] for item in json.loads(diff.stdout)["modules"]) == expected
    walk = run_cli("walk", "specs/two_modules.yaml", "--module", module, "--hook", "forward",
                   "--format", "json")
    assert walk.code == 0, walk.stderr
    targets = {event["target"] for walk_pass in json.loads(walk.stdout)["passes"]
               for event in walk_pass["events"]}
    assert sorted(targets) == expected
