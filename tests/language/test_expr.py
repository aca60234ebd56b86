"""The step parser: what the whitelist lets through, as our own node types, and what it refuses."""

from __future__ import annotations

import pytest

from gradexplain.errors import Location, SpecLimitError, SpecSafetyError, SpecSchemaError
from gradexplain.language.expr import (
    BinOp,
    Call,
    Ellipsis_,
    Index,
    Name,
    Neg,
    NewAxis,
    Number,
    Slice,
    Transpose,
    names_used,
    parse_step,
)

HERE = Location("spec.yaml", 3, 10, ("forward", 0))


def test_operators_keep_python_precedence() -> None:
    step = parse_step("y = a + b * c ** 2", HERE)
    assert step.targets == ("y",)
    expr = step.expr
    assert isinstance(expr, BinOp) and expr.op == "+"
    assert isinstance(expr.right, BinOp) and expr.right.op == "*"
    assert isinstance(expr.right.right, BinOp) and expr.right.right.op == "**"


def test_negative_number_folds_and_negative_name_does_not() -> None:
    assert parse_step("y = -3", HERE).expr == Number(-3, 4)
    negated = parse_step("y = -x", HERE).expr
    assert isinstance(negated, Neg) and negated.operand == Name("x", 5)


def test_call_with_keywords_and_tuple_targets() -> None:
    step = parse_step("a, b = chunk(x, 2, dim=-1)", HERE)
    assert step.targets == ("a", "b")
    assert step.target_columns == (0, 3)
    expr = step.expr
    assert isinstance(expr, Call) and expr.func == "chunk"
    assert expr.args == (Name("x", 13), Number(2, 16))
    assert expr.kwargs == (("dim", Number(-1, 23)),)


def test_indexing_and_transpose() -> None:
    expr = parse_step("y = x[0, 1:3, None, ...].T", HERE).expr
    assert isinstance(expr, Transpose)
    inner = expr.operand
    assert isinstance(inner, Index)
    assert inner.items == (0, Slice(1, 3, None), NewAxis(), Ellipsis_())


def test_names_used_in_reading_order() -> None:
    expr = parse_step("y = l(x) @ w + sum(v, dim=0)", HERE).expr
    assert [name.id for name in names_used(expr)] == ["l", "x", "w", "sum", "v"]


@pytest.mark.parametrize(
    ("text", "column", "says"),
    [
        ("y = x.__class__", 4, "'__class__' is refused"),
        ("y = __import__('os')", 4, "'__import__' is refused"),
        ("y = _secret", 4, "'_secret' is refused"),
        # What is neither a name nor a dotted name the parser refuses itself; dotted names
        # (`x.exp()`, `m.h`) the checker refuses, knowing what `x` and `m` are (test_qualified).
        ("y = (x * 2).exp()", 4, "attribute access '.exp'"),
        ("y = f(x).h", 4, "attribute access '.h'"),
        ("y = x.T.sum()", 4, "attribute access '.sum'"),
    ],
)
def test_refused_as_unsafe(text: str, column: int, says: str) -> None:
    with pytest.raises(SpecSafetyError) as caught:
        parse_step(text, HERE)
    assert says in caught.value.message
    assert caught.value.where is not None
    assert caught.value.where.column == HERE.column + column  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("y = x if a else b", "conditional expressions"),
        ("y = [x, x]", "list literals"),
        ("y = 'text'", "text literals"),
        ("y = x < 2", "comparisons"),
        ("y = x // 2", "operator //"),
        ("y = f(*x)", "`*args`"),
        ("y = f(**x)", "`**kwargs`"),
        ("y = (lambda: 1)()", "only a name can be called"),
        ("x * 2", "`name = expression`"),
        ("y = = 2", "cannot parse"),
        ("y = z = 2", "assigns once"),
        ("x[0] = 2", "left side of a step"),
        ("import os", "`name = expression`"),
        ("y = x[a]", "whole numbers"),
        ("for = 2", "cannot parse"),
        ("y = " + "(" * 40 + "x" + ")" * 40 + " + " * 0, "never"),
    ],
)
def test_refused_as_not_in_the_language(text: str, says: str) -> None:
    if says == "never":
        # Parentheses alone do not nest the tree: this one is fine.
        assert parse_step(text, HERE).expr == Name("x", 44)
        return
    with pytest.raises(SpecSchemaError) as caught:
        parse_step(text, HERE)
    assert says in caught.value.message


def test_deep_expressions_are_bounded() -> None:
    text = "y = " + " + ".join(["x"] * 40)
    with pytest.raises(SpecLimitError, match="nests more than"):
        parse_step(text, HERE)


@pytest.mark.parametrize(("text", "dotted", "column"), [
    ("y = m.h + x", "m.h", 4),
    ("y = x * m.l.weight", "m.l.weight", 8),
    ("y = m.h.T", "m.h", 4),
    ("y = x.exp()", "x.exp", 4),
    ("y = torch.exp(x)", "torch.exp", 4),
])
def test_dotted_names_are_kept_for_the_checker(text: str, dotted: str, column: int) -> None:
    used = names_used(parse_step(text, HERE).expr)
    assert Name(dotted, column) in used


def test_dotted_names_refuse_private_parts_at_once() -> None:
    with pytest.raises(SpecSafetyError, match="'__dict__' is refused"):
        parse_step("y = m.h.__dict__", HERE)
