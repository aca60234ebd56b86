"""The forward-step language: `name = expression`, parsed into a small tree of frozen dataclasses.

Python's `ast` does the parsing; we walk its tree against an explicit whitelist and copy what is
allowed into our own node types, so no later stage ever sees a Python AST and nothing is ever
evaluated, compiled or imported. Allowed: names, numbers, `+ - * / @ **`, unary minus, calls to a
name (a function from the catalogue, a layer, a module) with positional and keyword arguments,
indexing and slicing, and `.T`. Everything else is refused with the column it starts at, except
dotted names (`m.h`, `x.exp()`): those the checker refuses, because the right advice depends on
what `m` or `x` is in the step's scope (see qualified.py).
"""

from __future__ import annotations

import ast
import keyword
import re
import unicodedata
from dataclasses import dataclass

from gradexplain.errors import (
    Location,
    SpecLimitError,
    SpecSafetyError,
    SpecSchemaError,
    quoted,
    the_number,
)

MAX_STEP_CHARS = 1_000
MAX_NAME_CHARS = 64
# The largest magnitude a number in a spec may have: float32's largest finite value. A larger one
# would silently become inf in a float32 tensor, and every gradient through it nan.
LARGEST_NUMBER = 3.4028234663852886e38
MAX_EXPR_DEPTH = 32

_BINARY_OPS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.MatMult: "@",
    ast.Pow: "**",
}


@dataclass(frozen=True)
class Name:
    """A name read by a step. A dotted `id` (`m.h`, `x.exp`) is kept only so the checker, which
    knows what `m` and `x` are, can refuse it with the right advice: no later stage sees one."""

    id: str
    column: int


@dataclass(frozen=True)
class Number:
    value: float | int | bool
    column: int


@dataclass(frozen=True)
class BinOp:
    op: str
    left: Expr
    right: Expr
    column: int


@dataclass(frozen=True)
class Neg:
    operand: Expr
    column: int


@dataclass(frozen=True)
class Transpose:
    """`x.T`, the only attribute the language has."""

    operand: Expr
    column: int


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Expr, ...]
    kwargs: tuple[tuple[str, Expr], ...]
    column: int


@dataclass(frozen=True)
class Slice:
    start: int | None
    stop: int | None
    step: int | None


@dataclass(frozen=True)
class NewAxis:
    """`None` inside brackets, as in `x[:, None]`."""


@dataclass(frozen=True)
class Ellipsis_:
    """`...` inside brackets."""


IndexItem = int | Slice | NewAxis | Ellipsis_


@dataclass(frozen=True)
class Index:
    operand: Expr
    items: tuple[IndexItem, ...]
    column: int


Expr = Name | Number | BinOp | Neg | Transpose | Call | Index


@dataclass(frozen=True)
class Assignment:
    """One parsed step: the names it defines and the expression that computes them."""

    targets: tuple[str, ...]
    expr: Expr
    text: str
    target_columns: tuple[int, ...]


def parse_step(text: str, where: Location) -> Assignment:
    """Parse `a = expr` or `a, b = expr`. `where` points at the first character of `text`."""
    if len(text) > MAX_STEP_CHARS:
        raise SpecLimitError(
            f"the step has {len(text):,} characters; a step is at most {MAX_STEP_CHARS:,}: "
            "split it into several steps", where
        )
    if "\n" in text.strip():
        raise SpecSchemaError("a step is one line: `name = expression`", where)
    for word in re.finditer(r"\w+", text):
        _refuse_look_alike(word.group(), where.shifted(word.start()))
    try:
        module = ast.parse(text.strip(), mode="exec")
    except SyntaxError as exc:
        column = (exc.offset or 1) - 1
        raise SpecSchemaError(
            f"cannot parse the step {quoted(text.strip())}: {exc.msg}; "
            "a step is `name = expression`",
            where.shifted(column + _leading(text)),
        ) from None
    statements = module.body
    if len(statements) != 1 or not isinstance(statements[0], ast.Assign):
        raise SpecSchemaError(
            f"a step is `name = expression`, got {quoted(text.strip())}", where
        )
    statement = statements[0]
    parser = _Parser(where.shifted(_leading(text)))
    parser.refuse_private(statement)
    if len(statement.targets) != 1:
        raise SpecSchemaError("a step assigns once: `a = expr` (no `a = b = expr`)", where)
    targets, columns = parser.targets(statement.targets[0])
    expr = parser.expr(statement.value, 0)
    return Assignment(targets, expr, text.strip(), columns)


def _leading(text: str) -> int:
    return len(text) - len(text.lstrip())


def _refuse_look_alike(word: str, where: Location, what: str = "name") -> None:
    """Python reads a name in its NFKC form (`ｘ` is `x`, `ﬁ` is `fi`): a step would silently
    use another tensor than the one so written, so such a name is refused."""
    plain = unicodedata.normalize("NFKC", word)
    if plain != word:
        raise SpecSchemaError(
            f"{what} {quoted(word)} is read by Python as {quoted(plain)} (it normalises the "
            f"letters of a name): write {quoted(plain)}, or a name of other letters", where)


def check_identifier(name: str, where: Location, what: str = "name") -> None:
    """Names people define must be plain identifiers: no keywords, no leading underscore, and
    short enough to quote in a one-line message."""
    if len(name) > MAX_NAME_CHARS:
        raise SpecLimitError(
            f"{what} {quoted(name, 20)} has {len(name):,} characters; a name is at most "
            f"{MAX_NAME_CHARS}", where,
        )
    if not name.isidentifier() or keyword.iskeyword(name):
        raise SpecSchemaError(
            f"{what} {quoted(name)} is not a valid name (letters, digits and _ ; not a Python "
            "keyword)",
            where,
        )
    _refuse_look_alike(name, where, what)
    if name.startswith("_"):
        raise SpecSafetyError(
            f"{what} {name!r} starts with '_'; such names are reserved (dunders reach Python "
            "internals)",
            where,
        )


class _Parser:
    """Copies an allowed Python AST into the node types above, refusing everything else."""

    def __init__(self, where: Location) -> None:
        self.where = where

    def refuse_private(self, tree: ast.AST) -> None:
        """Refuse any `_name` or `._attr` anywhere first, so the message names the real danger."""
        for node in ast.walk(tree):
            name = node.id if isinstance(node, ast.Name) else (
                node.attr if isinstance(node, ast.Attribute) else None)
            if name is not None and name.startswith("_"):
                raise SpecSafetyError(
                    f"{name!r} is refused: names starting with '_' reach Python internals "
                    "(__import__, __class__, ...), and specs never run code",
                    self._at(node),
                )

    def _at(self, node: ast.AST) -> Location:
        return self.where.shifted(getattr(node, "col_offset", 0))

    def targets(self, node: ast.expr) -> tuple[tuple[str, ...], tuple[int, ...]]:
        names = node.elts if isinstance(node, ast.Tuple) else [node]
        result: list[str] = []
        columns: list[int] = []
        for item in names:
            if not isinstance(item, ast.Name):
                raise SpecSchemaError(
                    "the left side of a step is a name, or names separated by commas",
                    self._at(item),
                )
            check_identifier(item.id, self._at(item))
            result.append(item.id)
            columns.append(item.col_offset)
        return tuple(result), tuple(columns)

    def expr(self, node: ast.expr, depth: int) -> Expr:
        if depth > MAX_EXPR_DEPTH:
            raise SpecLimitError(
                f"the expression nests more than {MAX_EXPR_DEPTH} levels; split it into steps",
                self._at(node),
            )
        column = getattr(node, "col_offset", 0)
        if isinstance(node, ast.Name):
            check_identifier(node.id, self._at(node))
            return Name(node.id, column)
        if isinstance(node, ast.Constant):
            return Number(self._number(node), column)
        if isinstance(node, ast.BinOp):
            op = _BINARY_OPS.get(type(node.op))
            if op is None:
                raise SpecSchemaError(
                    f"the operator {_op_text(node.op)} is not in the step language "
                    "(+ - * / @ ** only)",
                    self._at(node),
                )
            return BinOp(op, self.expr(node.left, depth + 1), self.expr(node.right, depth + 1),
                         column)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.UAdd):
                return self.expr(node.operand, depth + 1)
            if isinstance(node.op, ast.USub):
                operand = self.expr(node.operand, depth + 1)
                if isinstance(operand, Number) and not isinstance(operand.value, bool):
                    return Number(-operand.value, column)
                return Neg(operand, column)
            raise SpecSchemaError("only unary minus is allowed", self._at(node))
        if isinstance(node, ast.Attribute):
            if node.attr == "T":
                return Transpose(self.expr(node.value, depth + 1), column)
            if node.attr.startswith("_"):
                raise SpecSafetyError(
                    f"attribute access '.{node.attr}' is refused: specs never reach Python "
                    "internals",
                    self._at(node),
                )
            dotted = self._dotted(node)
            if dotted is not None:
                return Name(dotted, column)
            raise self._refuse(node)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        if isinstance(node, ast.Subscript):
            return Index(self.expr(node.value, depth + 1), self._index(node.slice), column)
        raise self._refuse(node)

    def _dotted(self, node: ast.Attribute) -> str | None:
        """`m.h` or `m.l.weight` as one dotted name, for the checker to refuse with advice that
        depends on what `m` is (a module, a layer, a tensor); None for anything else (`f(x).h`,
        `x.T.h`), which the parser refuses itself."""
        parts: list[str] = []
        item: ast.expr = node
        while isinstance(item, ast.Attribute) and item.attr != "T":
            check_identifier(item.attr, self._at(item))
            parts.append(item.attr)
            item = item.value
        if not isinstance(item, ast.Name):
            return None
        check_identifier(item.id, self._at(item))
        return ".".join([item.id, *reversed(parts)])

    def _call(self, node: ast.Call, depth: int) -> Call:
        func = node.func
        if isinstance(func, ast.Name):
            check_identifier(func.id, self._at(func))
            called = func.id
        elif isinstance(func, ast.Attribute) and (dotted := self._dotted(func)) is not None:
            called = dotted  # `m.l(x)`, `x.exp()`: the checker refuses it with advice
        elif isinstance(func, ast.Attribute):
            raise self._refuse(func)
        else:
            raise SpecSchemaError(
                "only a name can be called: a function, a layer or a module", self._at(node)
            )
        args: list[Expr] = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise SpecSchemaError("`*args` is not in the step language", self._at(arg))
            args.append(self.expr(arg, depth + 1))
        kwargs: list[tuple[str, Expr]] = []
        for kw in node.keywords:
            if kw.arg is None:
                raise SpecSchemaError("`**kwargs` is not in the step language", self._at(kw))
            check_identifier(kw.arg, self._at(kw), "keyword")
            kwargs.append((kw.arg, self.expr(kw.value, depth + 1)))
        return Call(called, tuple(args), tuple(kwargs), node.col_offset)

    def _index(self, node: ast.expr) -> tuple[IndexItem, ...]:
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        return tuple(self._index_item(item) for item in items)

    def _index_item(self, node: ast.expr) -> IndexItem:
        if isinstance(node, ast.Slice):
            return Slice(self._int_or_none(node.lower), self._int_or_none(node.upper),
                         self._int_or_none(node.step))
        if isinstance(node, ast.Constant) and node.value is None:
            return NewAxis()
        if isinstance(node, ast.Constant) and node.value is Ellipsis:
            return Ellipsis_()
        value = self._int_or_none(node)
        if value is None:
            raise SpecSchemaError("an index is a whole number, a slice, None or ...",
                                  self._at(node))
        return value

    def _int_or_none(self, node: ast.expr | None) -> int | None:
        if node is None:
            return None
        parsed = self.expr(node, 0)
        if isinstance(parsed, Number) and isinstance(parsed.value, int) \
                and not isinstance(parsed.value, bool):
            return parsed.value
        raise SpecSchemaError("indices and slice bounds are whole numbers written in the step",
                              self._at(node))

    def _number(self, node: ast.Constant) -> float | int | bool:
        value = node.value
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            # Python reads 1e999 as inf and 10**40 as an integer torch cannot hold.
            if not abs(value) <= LARGEST_NUMBER:
                raise SpecSchemaError(
                    f"{the_number(value)} is too large: numbers in a spec are at most "
                    "3.4e38 in size, the largest a float32 tensor holds",
                    self._at(node),
                )
            return value
        kind = "text" if isinstance(value, str) else type(value).__name__
        raise SpecSchemaError(
            f"{kind} literals are not in the step language; only numbers (and True/False "
            "for keyword flags)",
            self._at(node),
        )

    def _refuse(self, node: ast.AST) -> SpecSafetyError | SpecSchemaError:
        where = self._at(node)
        if isinstance(node, ast.Attribute):
            # Imported here: the catalogue's shape rules import this module.
            from gradexplain.language.catalogue import attribute_advice
            return SpecSafetyError(
                f"attribute access '.{node.attr}' is not in the step language"
                f"{attribute_advice(node.attr, '...')}",
                where,
            )
        if isinstance(node, ast.Lambda | ast.NamedExpr | ast.Await | ast.Yield | ast.YieldFrom):
            return SpecSafetyError(f"{type(node).__name__} would run code and is refused", where)
        what = {
            ast.Compare: "comparisons",
            ast.BoolOp: "and/or",
            ast.IfExp: "conditional expressions",
            ast.List: "list literals",
            ast.Tuple: "tuple literals",
            ast.Dict: "dict literals",
            ast.Set: "set literals",
            ast.ListComp: "comprehensions",
            ast.GeneratorExp: "generators",
            ast.DictComp: "comprehensions",
            ast.SetComp: "comprehensions",
            ast.JoinedStr: "f-strings",
        }.get(type(node), type(node).__name__)
        return SpecSchemaError(f"{what} are not in the step language", where)


def _op_text(op: ast.operator) -> str:
    return {ast.FloorDiv: "//", ast.Mod: "%", ast.LShift: "<<", ast.RShift: ">>",
            ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^"}.get(type(op), type(op).__name__)


def names_used(expr: Expr) -> list[Name]:
    """Every name an expression reads, including called ones, in reading order."""
    if isinstance(expr, Name):
        return [expr]
    if isinstance(expr, Number):
        return []
    if isinstance(expr, BinOp):
        return names_used(expr.left) + names_used(expr.right)
    if isinstance(expr, Neg | Transpose | Index):
        return names_used(expr.operand)
    result = [Name(expr.func, expr.column)]
    for arg in expr.args:
        result += names_used(arg)
    for _, value in expr.kwargs:
        result += names_used(value)
    return result
