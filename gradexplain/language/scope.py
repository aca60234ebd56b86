"""A module's scope while it is checked: what each name stands for, and the rules names obey.

Names are defined once, before use, and never take a step-language function's name, one of
nn.Module's own attributes, or a Python builtin's. When a step reads a name that is not there,
the message says which of three things happened: a typo (with a suggestion), a step out of
order, or steps in a cycle.
"""

from __future__ import annotations

import builtins
import difflib
from dataclasses import dataclass

from gradexplain.errors import Location, SpecNameError, SpecSafetyError
from gradexplain.language.catalogue import FUNCTIONS, MODULE_ATTRIBUTES, RESERVED_NAMES
from gradexplain.language.expr import BinOp, Call, Expr, Index, Name, Neg, Transpose, names_used
from gradexplain.language.model import LayerSpec, ModuleSpec, Step
from gradexplain.language.shapes import ValueType


@dataclass(frozen=True)


class Entry:
    """Something a name in a module's scope stands for."""

    kind: str  # "input", "argument", "parameter", "layer", "module", "step"
    where: Location
    value: ValueType | LayerSpec | ModuleSpec


Scope = dict[str, Entry]


# Python's builtins (open, eval, print, input, ...): no spec may define a name that shadows one.
# Nothing in gradexplain ever looks a spec's name up in Python, so such a name could do no harm
# today; refusing it keeps a spec from reading as if it used Python's `open`, and keeps specs
# safe should a later stage ever hand names to Python.
PYTHON_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))


def check_not_builtin(name: str, kind: str, where: Location) -> None:
    """Refuse a defined name (of an input, step, layer, capture...) that is a Python builtin."""
    if name in PYTHON_BUILTINS:
        raise SpecSafetyError(
            f"{kind} {name!r} would shadow the Python builtin of that name; specs never reach "
            "Python's names, so choose another name",
            where,
        )


def define(scope: Scope, name: str, entry: Entry) -> None:
    """Add a name to a module's scope, refusing reserved names and names defined twice."""
    if name in RESERVED_NAMES:
        raise SpecNameError(
            f"{name!r} is a function of the step language and cannot name {a_kind(entry.kind)}; "
            "choose another name",
            entry.where,
        )
    if entry.kind in ("parameter", "layer", "module") and name in MODULE_ATTRIBUTES:
        raise SpecNameError(
            f"{name!r} is an attribute of every torch.nn.Module and cannot name a "
            f"{entry.kind}; choose another name",
            entry.where,
        )
    check_not_builtin(name, entry.kind, entry.where)
    if name in scope:
        first = scope[name]
        raise SpecNameError(
            f"{name!r} is defined twice: as {a_kind(first.kind)} at {_line_col(first.where)} "
            f"and as {a_kind(entry.kind)} here; names in one module must differ",
            entry.where,
        )
    scope[name] = entry


def check_step_names(module: ModuleSpec, scope: Scope, index: int) -> None:
    """Every name a step reads must be defined by an earlier line; say precisely why not."""
    step = module.steps[index]
    for name in names_used(step.assignment.expr):
        if name.id in scope or name.id in FUNCTIONS:
            continue
        where = step.where.shifted(name.column)
        later = [i for i, other in enumerate(module.steps) if name.id in other.targets]
        if later and later[0] >= index:
            cycle = _cycle_through(module, index, later[0])
            if cycle:
                raise SpecNameError(
                    f"the steps form a cycle: {' -> '.join(cycle)}; a step can only use "
                    "names that earlier steps define",
                    where,
                )
            raise SpecNameError(
                f"{name.id!r} is used before step {later[0] + 1} defines it; steps run in "
                "order, so move this step after that one",
                where,
            )
        what = "function, layer or module" if _is_called(step, name) else "name"
        choices = list(scope) + (list(FUNCTIONS) if what != "name" else [])
        raise SpecNameError(
            f"unknown {what} {name.id!r}{suggest(name.id, choices)}"
            f"{_defined_in(module, scope)}",
            where,
        )


def _is_called(step: Step, name: Name) -> bool:
    def walk(expr: Expr) -> bool:
        if isinstance(expr, Call):
            if expr.func == name.id and expr.column == name.column:
                return True
            return any(walk(arg) for arg in expr.args) or any(
                walk(value) for _, value in expr.kwargs)
        if isinstance(expr, BinOp):
            return walk(expr.left) or walk(expr.right)
        if isinstance(expr, Neg | Transpose | Index):
            return walk(expr.operand)
        return False
    return walk(step.assignment.expr)


def _cycle_through(module: ModuleSpec, start: int, later: int) -> list[str]:
    """The names around a cycle that starts at step `start`, or [] when there is none."""
    defines = {name: i for i, step in enumerate(module.steps) for name in step.targets}
    reads = {i: [n.id for n in names_used(step.assignment.expr) if n.id in defines]
             for i, step in enumerate(module.steps)}
    start_names = module.steps[start].targets
    path: list[str] = []

    def reaches(step_index: int, seen: set[int]) -> bool:
        for name in reads[step_index]:
            if name in start_names:
                path.append(name)
                return True
            target = defines[name]
            if target in seen:
                continue
            seen.add(target)
            if reaches(target, seen):
                path.append(name)
                return True
        return False

    if reaches(later, {later}):
        names = [module.steps[later].targets[0], *reversed(path)]
        return [start_names[0], *names] if names[0] != start_names[0] else names
    return []


def a_kind(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _line_col(where: Location) -> str:
    return f"{where.line}:{where.column}" if where.line is not None else "?"


def suggest(name: str, choices: list[str] | Scope) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def module_label(module: ModuleSpec) -> str:
    return "the top level" if module.path == "" else f"module {module.path!r}"


# A message lists at most this many names, of at most this many characters together: with 300
# steps, or one 200-character name, the list would be the whole message.
MAX_LISTED = 12
MAX_LISTED_CHARS = 120


def listed(names: list[str], empty: str) -> str:
    """Names as a message lists them: `a, b and 290 more` within the bounds above, `empty`
    when there are none."""
    shown: list[str] = []
    for name in names:
        if len(shown) == MAX_LISTED or sum(map(len, shown)) + len(name) > MAX_LISTED_CHARS:
            break
        shown.append(name)
    text = ", ".join(shown) if names else empty
    if len(names) > len(shown):
        more = f"{len(names) - len(shown)} more"
        text = f"{text} and {more}" if shown else more
    return text


def _defined_in(module: ModuleSpec, scope: dict[str, Entry]) -> str:
    names = listed(list(scope), "nothing yet")
    return f" (defined in {module_label(module)} at this point: {names})"

