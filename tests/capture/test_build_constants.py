"""The builder folds written numbers through the checker's fold: a constant that no check ruled
out still cannot hang a run or raise anything but an ArithmeticError, which the step runner
reports at its step (issue 19)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from gradexplain.capture.build import build, evaluate
from gradexplain.errors import SpecRunError
from gradexplain.language import load_spec_text
from gradexplain.language.constants import ConstantProblem
from gradexplain.language.expr import BinOp, Number
from gradexplain.language.model import Step
from tests.helpers.capture import run_forward


def number(value: float) -> Number:
    return Number(value, 0)


@pytest.mark.parametrize(("op", "left", "right"), [
    ("/", 3, 4), ("**", 2, -2), ("**", -8, 2.0), ("-", 0.5, 8), ("*", True, 2.5),
])
def test_numbers_fold_as_python_computes_them(op: str, left: float, right: float) -> None:
    expected = {"/": left / right, "**": left ** right, "-": left - right,
                "*": left * right}[op]
    got = evaluate(BinOp(op, number(left), number(right), 0), {})
    assert math.isclose(got, expected, rel_tol=1e-12)


@pytest.mark.parametrize(("op", "left", "right"), [
    ("/", 1, 0), ("**", 0.0, -1), ("**", -8, 0.5), ("**", 10, 10**8),
])
def test_bad_numbers_raise_a_constant_problem(op: str, left: float, right: float) -> None:
    with pytest.raises(ConstantProblem):
        evaluate(BinOp(op, number(left), number(right), 0), {})


def test_a_number_beside_a_tensor_is_torchs() -> None:
    x = torch.tensor([1.0, 2.0])
    got = evaluate(BinOp("/", BinOp("*", number(2), number(3), 0), number(4), 0), {})
    torch.testing.assert_close(evaluate(BinOp("*", number(got), number(0), 0), {}) + x,
                               x + 2 * 3 / 4 * 0)
    torch.testing.assert_close(x ** -1, evaluate(BinOp("**", number(0), number(0), 0), {}) / x)


def test_a_bad_fold_at_run_time_is_reported_at_its_step() -> None:
    """A checked spec whose step is swapped for one the checker would refuse: the run says
    where, exit 2, as it does for a step torch refuses."""
    spec = load_spec_text("inputs:\n  x: {rand: [3], requires_grad: true}\n"
                          "forward: ['y = x * (1 / 2)', 'z = sum(y)']\nbackward: z\n", "c.yaml")
    step = spec.root.steps[0]
    assert isinstance(step.assignment.expr, BinOp)
    bad_expr = replace(step.assignment.expr, right=BinOp("/", number(1), number(0), 9))
    bad: Step = replace(step, assignment=replace(step.assignment, expr=bad_expr))
    spec = replace(spec, root=replace(spec.root, steps=(bad, *spec.root.steps[1:])))
    with pytest.raises(SpecRunError) as caught:
        run_forward(build(spec))
    assert caught.value.exit_code == 2
    assert caught.value.one_line().startswith("c.yaml:3:")
    assert "zero" in caught.value.message
