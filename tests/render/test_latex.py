"""The LaTeX of formulas and tensor names (render/latex.py): every local-derivative rule converts to
LaTeX that the checker accepts, with the operands and prose where they belong."""

from __future__ import annotations

import re

import pytest

from gradexplain.capture.rules import RULES, local_derivatives
from gradexplain.records.names import Naming
from gradexplain.render.latex import PROSE, formula_latex, tensor_latex
from gradexplain.render.markdown import math, table
from tests.helpers.mdcheck import (
    assert_latex_well_formed,
    assert_markdown_well_formed,
)

# --- formulas --------------------------------------------------------------------------------

# Operand names as capture/derive.py writes them, and how each must come out in LaTeX.
OPERANDS = {
    "t": "t",
    "x1": "x_{1}",
    "(weightᵀ)": r"(\mathrm{weight}^{\top})",
    "z:mul": r"\mathrm{z{:}mul}",
    "y@2": "y^{(2)}",
    "sum#3": r"\mathrm{sum\#3}",
    "x_temp": r"\mathrm{x\_temp}",
    "(t (reshaped))": r"(t\text{ (reshaped)})",
}
NAME_SETS = [["t", "x1", "z:mul"], ["(weightᵀ)", "y@2", "sum#3"], ["x_temp", "(t (reshaped))"]]


@pytest.mark.parametrize("node", sorted(RULES) + ["FooBackward0", "torch::autograd::CopySlices"])
def test_formula_latex_converts_every_rule(node: str) -> None:
    for names in NAME_SETS:
        formulas, has_rule = local_derivatives(node, names, names[0])
        assert has_rule == (node in RULES)
        for formula in formulas:
            latex = formula_latex(formula)
            assert latex.isascii(), f"{formula!r} left {latex!r}"
            assert_latex_well_formed(latex)
            for name, expected in OPERANDS.items():
                if name in formula:
                    # A square root's braces replace its operand's parentheses.
                    root = rf"\sqrt{{{expected.removeprefix('(').removesuffix(')')}}}"
                    assert expected in latex or root in latex, \
                        f"{name!r} in {formula!r} became {latex!r}"
            prose = " ".join(re.findall(r"\\text\{([^{}]*)\}", latex))
            for word in re.findall(r"[A-Za-z]+", formula):
                if word in PROSE:
                    assert word in re.findall(r"[A-Za-z]+", prose), \
                        f"{word!r} is not \\text in {latex!r}"
            assert_markdown_well_formed(table(["formula"], [[math(latex)]]))


@pytest.mark.parametrize("formula, expected", [
    ("g ⊙ σ(t)(1 − σ(t))", r"g \odot \sigma(t)(1 - \sigma(t))"),
    ("g · weightᵀ", r"g \cdot \mathrm{weight}^{\top}"),
    ("(weightᵀ)ᵀ · g", r"(\mathrm{weight}^{\top})^{\top} \cdot g"),
    ("Σ_rows g", r"\sum_{\text{rows}} g"),
    ("g ⊙ n·xⁿ⁻¹", r"g \odot n\cdot x^{n-1}"),
    ("g reshaped to t's shape", r"g\text{ reshaped to }t\text{'s shape}"),
    ("t.grad += g", r"t.\mathrm{grad} \mathrel{+}= g"),
    ("g / (2√x)", r"g / (2\sqrt{x})"),
    ("g ⊙ (1 − tanh²(h))", r"g \odot (1 - \tanh^{2}(h))"),
    ("g ⊙ c (the number)", r"g \odot c\text{ (the number)}"),
    ("J_MyBackward0ᵀ g (input 1)", r"J_{\text{MyBackward0}}^{\top} g\text{ (input 1)}"),
    ("y@2ᵀ · g", r"{y^{(2)}}^{\top} \cdot g"),
    ("Σ g ⊙ x̂", r"\sum g \odot \hat{x}"),
    ("weightᵀ", r"\mathrm{weight}^{\top}"),
])
def test_formula_latex_examples(formula: str, expected: str) -> None:
    assert formula_latex(formula) == expected
    assert_latex_well_formed(expected)


def test_tensor_latex_uses_the_short_name() -> None:
    spec = Naming()
    assert tensor_latex("module2.t", spec) == "t"
    assert tensor_latex("module2.l.weight", spec) == r"\mathrm{weight}"
    assert tensor_latex("t (reshaped)", spec) == r"t\text{ (reshaped)}"


def test_tensor_latex_keeps_a_python_models_whole_name() -> None:
    """`head.weight` and `encoder.0.weight` are told apart only by their paths."""
    whole = Naming(whole=True)
    assert tensor_latex("head.weight", whole) != tensor_latex("encoder.weight", whole)
    assert tensor_latex("head.weight", Naming()) == tensor_latex("encoder.weight", Naming())
