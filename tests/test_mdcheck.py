"""The markdown and LaTeX checker of the tests (tests/helpers/mdcheck.py) must reject what GitHub
would render broken, and accept what it renders well."""

from __future__ import annotations

import pytest

from tests.helpers.mdcheck import (
    assert_latex_well_formed,
    assert_markdown_well_formed,
)

# --- the checker must be able to fail --------------------------------------------------------


@pytest.mark.parametrize("markdown, complaint", [
    ("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n", "has 3 cells, the header 2"),
    ("| a | b |\n|---|---|\n| $x|y$ | 2 |\n", "cells, the header 2"),
    ("cost $ x$ here\n", "a '$' outside math"),
    ("```py\nprint(1)\n", "never closed"),
    ("the <model> hook\n", "raw HTML"),
    ("| a | b |\n| 1 | 2 |\n", "looks like a table row"),
    ("$\\frac{a}{b$\n", "unbalanced"),
    ("| a |\n|---|\n| $\\foo$ |\n", "unknown command"),
])
def test_mdcheck_rejects_broken_markdown(markdown: str, complaint: str) -> None:
    with pytest.raises(AssertionError, match=complaint.replace("$", r"\$")):
        assert_markdown_well_formed(markdown)


@pytest.mark.parametrize("latex, complaint", [
    (r"\frac{a}{b", "unbalanced '{'"),
    (r"a}", "unbalanced '}'"),
    (r"\left( x", r"\\left without \\right"),
    (r"{\left( x}\right)", r"\\left without \\right"),
    (r"x \right)", r"\\right without its \\left"),
    (r"\left x \right)", "not a delimiter"),
    (r"\foo{x}", "unknown command"),
    (r"x^{2}^{3}", "double superscript"),
    (r"y^{(2)}^{\top}", "double superscript"),
    (r"x_1_2", "double subscript"),
    (r"\mathrm{sum#3}", "unescaped '#'"),
    (r"a $ b", "unescaped '\\$'"),
    ("∂z", "non-ASCII"),
    (r"g reshaped", "'reshaped' would be set as italic"),
    (r"x^", "ends inside"),
])
def test_mdcheck_rejects_broken_latex(latex: str, complaint: str) -> None:
    with pytest.raises(AssertionError, match=complaint):
        assert_latex_well_formed(latex)


@pytest.mark.parametrize("latex", [
    r"\frac{\partial z}{\partial t}",
    r"\left(\frac{\partial z}{\partial \mathrm{weight}}\right)^{\top}",
    r"\operatorname{reshape}\left(\frac{\partial z}{\partial t}\right)",
    r"\frac{\partial z}{\partial t}\Big\vert _{\mathrm{via}\ y}",
    r"\sum_{2\ \mathrm{calls}} \frac{\partial y}{\partial x}",
    r"{y^{(2)}}^{\top}",
    r"x_{1}^{2}",
    r"\mathrm{z{:}mul} \text{ é}",
])
def test_mdcheck_accepts_good_latex(latex: str) -> None:
    assert_latex_well_formed(latex)
