"""A value recorded as a summary (over the value limit) that holds a nan or an inf is not
checked: its min, max, mean and norm are then nan or inf whatever its other values are, and a
check of summary against summary would verify any value of its shape holding one nan. A value
recorded whole is checked as ever, nan for nan in the same places. Plain torch says where the
nans are."""

from __future__ import annotations

import math

import torch
from torch import nn

from gradexplain.api import explain
from gradexplain.capture.checks import check, says_too_little
from gradexplain.records.check import NOT_FINITE_SUMMARY
from gradexplain.records.trace import Summary, TensorValue
from gradexplain.records.walk import LabelledArg


class Masked(nn.Module):
    """|(x W + b) ⊙ m| as sqrt of a square: where m is 0, the gradient is 0 · inf = nan."""

    def __init__(self, width: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.l = nn.Linear(width, width)
        mask = torch.ones(width)
        mask[0] = 0.0
        self.register_buffer("m", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt((self.l(x) * self.m) ** 2)


def weight_gradient(width: int, x: torch.Tensor) -> torch.Tensor:
    model = Masked(width)
    gradient, = torch.autograd.grad(model(x).sum(), model.l.weight)
    return gradient


def labelled(explanation_args: list[LabelledArg], wrt: str) -> list[LabelledArg]:
    return [arg for arg in explanation_args if arg.meaning is not None
            and arg.meaning.wrt == wrt and arg.value is not None]


def every_arg(max_values: int, width: int, x: torch.Tensor) -> list[LabelledArg]:
    walk = explain(Masked(width), x, max_values=max_values).walk
    return [arg for walk_pass in walk.passes for event in walk_pass.events
            for arg in event.args]


def test_a_summary_holding_a_nan_is_not_checked() -> None:
    x = torch.randn(2, 40, generator=torch.Generator().manual_seed(1))
    assert weight_gradient(40, x).isnan().any()  # torch: 0 · inf in column 0
    args = every_arg(1_000, 40, x)
    weights = labelled(args, "l.weight")
    assert weights  # 1,600 elements: recorded as summaries
    for arg in weights:
        assert arg.value is not None and arg.value.value is None
        assert arg.value.summary is not None and math.isnan(arg.value.summary.mean)
        assert arg.check is None and arg.not_checked == NOT_FINITE_SUMMARY
    biases = labelled(args, "l.bias")  # 40 elements, recorded whole: checked nan for nan
    assert biases and all(arg.check is not None and arg.check.verified for arg in biases)


def test_recorded_whole_it_is_checked_nan_for_nan() -> None:
    """The advice the reason gives: with a higher value limit the value is recorded whole, and
    its check compares the nans' places and the finite rest with plain torch's."""
    x = torch.randn(2, 40, generator=torch.Generator().manual_seed(1))
    expected = weight_gradient(40, x)
    weights = labelled(every_arg(10_000, 40, x), "l.weight")
    assert weights
    for arg in weights:
        assert arg.check is not None and arg.check.verified
        assert arg.value is not None and arg.value.value is not None
        got = torch.tensor(arg.value.value, dtype=torch.float64)
        layout = arg.meaning.layout if arg.meaning else "as-is"
        reference = (expected.t() if layout == "transposed" else expected).double()
        assert torch.equal(got.isnan(), reference.isnan())
        finite = ~reference.isnan()
        assert torch.allclose(got[finite], reference[finite], rtol=1e-5, atol=1e-6)


def test_why_a_nan_summary_proves_nothing() -> None:
    """Two tensors whose finite values differ everywhere, one nan each: their summaries agree,
    so a summary check verifies one as the other; `says_too_little` is what stops that."""
    wrong = torch.full((40, 40), 3.0)
    wrong[0, 0] = math.nan
    right = torch.randn(40, 40)
    right[5, 5] = math.nan
    double = wrong.double()
    summary = Summary(float(double.min()), float(double.max()), float(double.mean()),
                      float(double.norm()))
    value = TensorValue((40, 40), "float32", None, summary)
    assert check(value, right).verified  # vacuous: nan agrees with nan
    assert says_too_little(value) == NOT_FINITE_SUMMARY
    finite = TensorValue((40, 40), "float32", None, Summary(1.0, 2.0, 1.5, 60.0))
    assert says_too_little(finite) is None
    assert says_too_little(TensorValue((2,), "float32", [math.nan, 1.0])) is None


def test_the_verdict_says_how_many_values_went_unchecked() -> None:
    """The verdict counts checks made; the values a nan summary left unchecked are counted
    under it, in text and markdown, and not where nothing went unchecked."""
    from gradexplain.records.check import summaries_not_checked_text
    from gradexplain.render.console import plain_text

    x = torch.randn(2, 40, generator=torch.Generator().manual_seed(1))
    explanation = explain(Masked(40), x, max_values=1_000)
    unchecked = [arg for arg in every_arg(1_000, 40, x) if arg.not_checked == NOT_FINITE_SUMMARY]
    line = summaries_not_checked_text(len(unchecked))
    assert unchecked and line.startswith(f"{len(unchecked)} labelled values not checked")
    assert line in " ".join(plain_text(explanation.text(), width=400).split())
    assert f"> [!WARNING]\n> {line}." in explanation.markdown()
    whole = explain(Masked(40), x, max_values=10_000)
    assert "not checked: recorded as summaries" not in plain_text(whole.text(), width=400)
