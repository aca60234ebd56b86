"""`gradexplain diff` on a module's arguments the trace has no name for, and on tensors passed by
keyword: a Python model's own forward makes a tensor (`self.s * 2`) and hands it to a submodule.
Legacy hooks see it as an operand of the last op; full hooks give grad_input for positional
arguments only (the facts file, B05), so a keyword argument is missing from full's and present
in legacy's. The values are compared with plain torch's hooks on the same model, and the advice
the verdict gives (pass it positionally) is checked by doing that in plain torch."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.analysis.diff import compare
from gradexplain.api import explain
from gradexplain.records.diff import ModuleDiff
from tests.analysis.test_diff import close, module_of, only_call, row


class Gate(nn.Module):
    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        assert scale is not None
        return x * scale


class Outer(nn.Module):
    """`lin`, then `gate` given a tensor this forward makes (or the parameter itself), by
    keyword or positionally."""

    def __init__(self, keyword: bool, made: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 3)
        self.gate = Gate()
        self.s = nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
        self.keyword, self.made = keyword, made

    def scale(self) -> torch.Tensor:
        return self.s * 2 if self.made else self.s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        out: torch.Tensor = (self.gate(h, scale=self.scale()) if self.keyword
                             else self.gate(h, self.scale()))
        return out


def torch_gate_hook(model: Outer, x: torch.Tensor, full: bool) -> tuple[Any, ...]:
    """What plain torch hands a legacy or full backward hook on `gate` for `model(x).sum()`."""
    calls: list[tuple[Any, ...]] = []

    def hook(_: nn.Module, grad_input: Any, grad_output: Any) -> None:
        calls.append(tuple(grad_input))

    register = (model.gate.register_full_backward_hook if full
                else model.gate.register_backward_hook)
    handle = register(hook)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(x).sum().backward()
    handle.remove()
    assert len(calls) == 1
    return calls[0]


def gate_diff(keyword: bool, made: bool) -> ModuleDiff:
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    return module_of(compare(explain(Outer(keyword, made), x).session), "gate")


def texts(module: ModuleDiff) -> str:
    return " ".join(finding.text for finding in module.findings())


@pytest.mark.parametrize("made", [True, False], ids=["made-in-forward", "parameter"])
def test_a_keyword_argument_is_named_as_one_and_full_hooks_leave_it_out(made: bool) -> None:
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    legacy_torch = torch_gate_hook(Outer(True, made), x, full=False)
    full_torch = torch_gate_hook(Outer(True, made), x, full=True)
    assert len(full_torch) == 1  # torch: positional arguments only
    gate = gate_diff(keyword=True, made=made)
    call = only_call(gate)
    legacy, full, same = row(call, "grad_input[1]")
    assert not same and full is None
    assert close(legacy, legacy_torch[1])  # the keyword tensor's gradient, as torch hands it
    first, full_first, _ = row(call, "grad_input[0]")
    assert close(first, legacy_torch[0]) and close(full_first, full_torch[0])
    said = texts(gate)
    assert "keyword argument scale" in said
    assert "not one of gate's arguments" not in said and "inside gate" not in said
    assert "keyword argument scale" in call.rows[1].note
    assert "pass scale positionally" in gate.verdict
    assert "which is not gate's input" not in gate.verdict


@pytest.mark.parametrize("made", [True, False], ids=["made-in-forward", "parameter"])
def test_passing_it_positionally_gives_full_hooks_its_gradient(made: bool) -> None:
    """The verdict's advice, done in plain torch: full's grad_input[1] is then ∂loss/∂scale."""
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    model = Outer(False, made)
    scale = model.scale()
    expected, = torch.autograd.grad(model.gate(model.lin(x), scale).sum(), scale)
    full_torch = torch_gate_hook(Outer(False, made), x, full=True)
    assert len(full_torch) == 2
    assert torch.allclose(full_torch[1], expected)
    gate = gate_diff(keyword=False, made=made)
    legacy, full, same = row(only_call(gate), "grad_input[1]")
    assert same and close(legacy, expected) and close(full, expected)
    assert None not in gate.arguments  # the tensor the forward made is an argument too
    assert "not one of gate's arguments" not in texts(gate)
    assert gate.verdict.startswith("legacy and full agree")


def test_an_argument_without_grad_is_not_called_not_a_tensor() -> None:
    """`m(x, x > 0)`: the mask is a tensor (torch's full hook gives it a grad_input entry) that
    does not require grad, so it has no name; the diff no longer calls it "not a tensor"."""
    from gradexplain.records.diff import UNNAMED_ARGUMENT
    from gradexplain.render.console import plain_text
    from gradexplain.render.text_diff import diff_text

    class Masked(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return x * mask

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = Masked()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.m(x.sin(), x > 0)
            return out

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1)).requires_grad_()
    model = Top()
    seen: list[tuple[Any, ...]] = []
    model.m.register_full_backward_hook(lambda _, grad_input, __: seen.append(grad_input))
    model(x).sum().backward()
    assert len(seen[0]) == 2  # torch: two tensor arguments
    diff = compare(explain(Top(), x).session)
    module = next(item for item in diff.modules if item.module == "m")
    assert module.arguments[1] is None
    text = plain_text(diff_text(diff))
    assert f"arguments: {module.arguments[0]}, {UNNAMED_ARGUMENT}" in text
    assert "(not a tensor)" not in text


def test_zeros_for_an_argument_without_grad_name_the_callers_tensor() -> None:
    """The model's own full hooks hand its forward a new tensor for `y` (which does not require
    grad); `m` gets that copy. Full's zeros for it are ∂loss/∂y = 0, named after the caller's
    y, not `m input 1`; plain torch's full hook gives zeros there."""

    class Pair(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return b * a.sin()

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = Pair()

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.m(x, y)
            return out

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1)).requires_grad_()
    y = torch.randn(2, 3, generator=torch.Generator().manual_seed(2))
    model = Top()
    seen: list[tuple[Any, ...]] = []
    model.register_full_backward_hook(lambda *_: None)  # as the full pass hooks the model too
    model.m.register_full_backward_hook(lambda _, grad_input, __: seen.append(grad_input))
    model(x, y).sum().backward()
    assert torch.equal(seen[0][1], torch.zeros(2, 3))  # torch: zeros for y
    diff = compare(explain(Top(), x, y).session)
    module = next(item for item in diff.modules if item.module == "m")
    _, full, _ = row(only_call(module), "grad_input[1]")
    assert full is not None and full.meaning is not None
    assert full.meaning.wrt == "y" and full.meaning.kind == "zero"
    assert close(full, torch.zeros(2, 3))
    assert "m input 1" not in " ".join(row_.note for row_ in only_call(module).rows)
