"""How a call's arguments meet a function's or layer's parameters, Python-style.

Both the checker (with inferred types) and the builder (with real values) bind through `bind`, so a
call means the same thing to both.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

ParamKind = Literal["tensor", "int", "float", "bool", "ints", "int_or_none", "pair", "int_or_ints"]
REQUIRED = object()


@dataclass(frozen=True)


class Param:
    """One parameter of a function or layer. `ints` takes every remaining positional argument."""

    name: str
    kind: ParamKind
    default: object = REQUIRED
    # Another parameter that must be written whenever this one is: torch.sum(x, keepdim=True)
    # is refused by torch, so keepdim requires dim.
    requires: str | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


Options = Mapping[str, object]


class BindProblem(Exception):
    """A call whose arguments do not match the rule's parameters."""


T = TypeVar("T")


def bind(
    what: str, params: tuple[Param, ...], args: Sequence[T], kwargs: Sequence[tuple[str, T]]
) -> dict[str, T | object]:
    """Match positional and keyword arguments to parameters, Python-style, filling defaults."""
    bound: dict[str, T | object] = {}
    position = 0
    for param in params:
        if param.kind == "ints":
            bound[param.name] = tuple(args[position:])
            position = len(args)
            break
        if position < len(args):
            bound[param.name] = args[position]
            position += 1
    if position < len(args):
        raise BindProblem(
            f"{what} takes at most {len(params)} positional argument(s), got {len(args)}"
        )
    names = [param.name for param in params]
    for key, value in kwargs:
        if key not in names:
            raise BindProblem(f"{what} has no argument {key!r}{did_you_mean(key, names)}")
        if key in bound:
            raise BindProblem(f"{what} got {key!r} twice")
        bound[key] = value
    for param in params:
        if param.requires is not None and param.name in bound and param.requires not in bound:
            raise BindProblem(f"{what}: {param.name} needs {param.requires} to be given too")
    for param in params:
        if param.name not in bound:
            if param.required:
                raise BindProblem(f"{what} needs the argument {param.name!r}")
            bound[param.name] = param.default
    return bound


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


WHOLE_NUMBERS = "whole-number (int64) tensors are only indices for an Embedding layer"
