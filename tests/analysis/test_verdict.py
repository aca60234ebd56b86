"""A diff row's `=` and its module's verdict say the same thing: where legacy's grad_input holds
each of full's derivatives. The oracle is plain torch: the same model, legacy and full hooks
registered here, and the legacy positions whose values equal full's (random data, so values
that agree are the same derivative, not a coincidence)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain import explain
from gradexplain.analysis.diff import compare
from gradexplain.records.diff import CallDiff, ModuleDiff
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import LabelledArg
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS
from tests.helpers.diffhooks import torch_hooks


def holders(legacy: tuple[Any, ...], wanted: torch.Tensor) -> list[int]:
    """The legacy positions whose value is `wanted` (same shape, same numbers)."""
    return [index for index, value in enumerate(legacy)
            if value is not None and value.shape == wanted.shape
            and torch.allclose(value, wanted, atol=1e-6)]


def tensor(arg: LabelledArg | None) -> torch.Tensor:
    assert arg is not None and arg.value is not None
    value: TensorValue = arg.value
    assert value.value is not None, "values here are small enough to be recorded whole"
    return torch.tensor(value.value, dtype=torch.float32)


def only_call(module: ModuleDiff) -> CallDiff:
    assert len(module.calls) == 1
    return module.calls[0]


class InputFirst(nn.Module):
    """The last op takes the module's input first: legacy grad_input[0] is full's."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


class InputSecond(nn.Module):
    """The same op with the parameter first: full's derivative moves to legacy's [1]."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w * x


class SubtractFrom(nn.Module):
    """`b - x`: gradients 1 and -1, so values tell the two operands apart."""

    def __init__(self) -> None:
        super().__init__()
        self.b = nn.Parameter(torch.randn(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b - x


class Divide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.rand(4) + 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.w


class Squashed(nn.Module):
    """The last op's input is made inside: legacy has nothing of full's."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


def _models() -> list[tuple[str, nn.Module, tuple[int, ...]]]:
    torch.manual_seed(7)
    return [
        ("conv2d", nn.Conv2d(3, 4, 3, padding=1), (1, 3, 5, 5)),
        ("conv2d_no_bias", nn.Conv2d(2, 3, 3, bias=False), (1, 2, 4, 4)),
        ("conv1d", nn.Conv1d(2, 3, 2), (1, 2, 5)),
        ("conv_relu", nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU()), (1, 2, 4, 4)),
        ("linear", nn.Linear(4, 3), (2, 4)),
        ("linear_no_bias", nn.Linear(4, 3, bias=False), (2, 4)),
        ("linear_3d", nn.Linear(4, 3), (2, 3, 4)),
        ("input_first", InputFirst(), (3, 4)),
        ("input_second", InputSecond(), (3, 4)),
        ("subtract_from", SubtractFrom(), (3, 4)),
        ("divide", Divide(), (3, 4)),
        ("squashed", Squashed(), (3, 4)),
    ]


MODELS = _models()


@pytest.mark.parametrize("name, model, shape", MODELS, ids=[item[0] for item in MODELS])
def test_rows_and_verdict_place_full_grad_input_where_torch_does(
        name: str, model: nn.Module, shape: tuple[int, ...]) -> None:
    torch.manual_seed(11)
    x = torch.randn(*shape, requires_grad=True)
    legacy_calls, full_calls = torch_hooks(model, (x,), False), torch_hooks(model, (x,), True)
    diff = explain(model, x).diff()
    by_path = {item.module: item for item in diff.modules}
    assert set(by_path) == {path for path, calls in full_calls.items() if calls}
    for path, module in by_path.items():
        call = only_call(module)
        (legacy_in, _), (full_in, _) = legacy_calls[path][0], full_calls[path][0]
        rows = {row.name: row for row in call.rows}
        wanted = full_in[0]
        where = holders(legacy_in, wanted)
        assert len(where) <= 1, f"{name}: pick data whose gradients differ"
        row = rows["grad_input[0]"]
        torch.testing.assert_close(tensor(row.full), wanted)
        for position, value in enumerate(legacy_in):
            legacy_row = rows[f"grad_input[{position}]"]
            if value is not None:
                torch.testing.assert_close(tensor(legacy_row.legacy), value)
        assert row.full is not None and row.full.meaning is not None
        text = row.full.meaning.text
        # The row's `=` is torch's "legacy grad_input[0] holds full's grad_input[0]".
        assert row.same == (where == [0]), (name, path)
        if all(item.same for item in call.rows):
            assert module.verdict.startswith("legacy and full agree"), module.verdict
            assert f"both give {text}" in module.verdict
        elif where:
            assert f"grad_input[{where[0]}] is full's {text}" in module.verdict, module.verdict
            assert f"not {text}" not in module.verdict, module.verdict
            if where != [0]:
                assert "operand order" in module.verdict
                assert f"is legacy's grad_input[{where[0]}]" in row.note
        else:
            assert f"not {text}" in module.verdict, module.verdict
            assert "is full's" not in module.verdict


def test_cnn_hooks_conv1_row_and_verdict_agree() -> None:
    """The case the issue found: net.conv1's grad_input[0] row is `=`, and its verdict says
    legacy's grad_input[0] is full's ∂score/∂image, never `not ∂score/∂image`."""
    diff = compare(captured("cnn_hooks.yaml"))
    conv1 = next(item for item in diff.modules if item.module == "net.conv1")
    row = next(row for row in only_call(conv1).rows if row.name == "grad_input[0]")
    assert row.same
    assert "its grad_input[0] is full's ∂score/∂image" in conv1.verdict
    assert "not ∂score/∂image" not in conv1.verdict
    fc = next(item for item in diff.modules if item.module == "net.fc")
    assert "its grad_input[1] is full's ∂score/∂f" in fc.verdict
    assert "not ∂score/∂f" not in fc.verdict


@pytest.mark.parametrize("spec", sorted(path.name for path in SPECS.glob("*.yaml")))
def test_no_verdict_denies_what_a_row_shows_equal(spec: str) -> None:
    """Over every spec: a derivative that a row shows `=` (or that legacy holds elsewhere) is
    never what the verdict says legacy lacks, and a verdict that says legacy holds
    `grad_input[k]` points at a legacy argument with exactly that derivative."""
    diff = compare(captured(spec))
    for module in diff.modules:
        differing = [call for call in module.calls if not all(row.same for row in call.rows)]
        for call in module.calls:
            legacy = {row.name: row.legacy for row in call.rows if row.legacy is not None}
            held = {arg.meaning.text for arg in legacy.values()
                    if arg.meaning is not None and arg.value is not None}
            for row in call.rows:
                if not row.name.startswith("grad_input") or row.full is None:
                    continue
                meaning = row.full.meaning
                if meaning is None or row.full.value is None:
                    continue
                if row.same or meaning.text in held:
                    assert not re.search(rf"not \(?{re.escape(meaning.text)}[,)]",
                                         module.verdict + ","), (module.module, module.verdict)
        if not differing:
            continue
        # The verdict speaks of the first call whose hooks differ.
        legacy = {row.name: row.legacy for row in differing[0].rows if row.legacy is not None}
        for position, text in re.findall(r"its grad_input\[(\d+)\] is full's (.+?)(?: \(|,)",
                                         module.verdict):
            arg = legacy.get(f"grad_input[{position}]")
            assert arg is not None and arg.meaning is not None, module.verdict
            assert arg.meaning.text == text, module.verdict
