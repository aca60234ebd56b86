"""Parameter values converted without pydantic, for the types the commands declare: the
conversion `cli_startup.conversion_without_pydantic` gives typer's parameters.

typer (0.2x) converts every value through a pydantic adapter, and importing pydantic and building
the adapters costs more than a small walk's whole run (`cli_startup`). The commands declare only
str, Path, int with bounds, bool flags, lists of these and choices read by a `parser`: those values
are converted here as typer's adapters would convert them (`tests/cli/test_conversion.py` checks
each against typer's own). Anything else, and any value not converted here (not a plain whole
number, out of bounds, not a choice, a path that cannot be read), goes to typer's own conversion,
which then says what is wrong in its own words: every usage message stays typer's. This module
reaches into typer's private conversion classes, so only `cli_startup` imports it, and only from a
typer that has them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

from typer._click import Context
from typer._coercion import RuntimeParam
from typer._param_types import coerce_cli_path, lenient_issubclass
from typer.core import _TyperParameter
from typer.models import ParameterInfo

# Longer numbers go to typer's conversion: none of the bounds comes near, and int() refuses
# strings past 4,300 digits with a message of its own.
MAX_DIGITS = 18


class NotConverted(Exception):
    """A value this module leaves to typer's own conversion."""


@dataclass(frozen=True)
class QuickConversion(RuntimeParam):
    """typer's conversion of one parameter, done here when it can be: `typer_conversion` (typer's
    own, built only when needed) converts what `convert` cannot."""

    typer_conversion: Callable[[], RuntimeParam]

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
        try:
            return convert(self.annotation, self.parameter_info, value, param, ctx)
        except Exception:  # whatever it is, typer's own conversion says it, in its words
            return self.typer_conversion()._coerce_value(value, param=param, ctx=ctx)


def convert(annotation: Any, info: ParameterInfo, value: Any, param: _TyperParameter,
            ctx: Context) -> Any:
    """`value` as typer's adapter for `annotation` would convert it; NotConverted (or the error
    a parser or a path check raises) when it is left to typer's conversion."""
    if get_origin(annotation) is list:
        (item_type,) = get_args(annotation)
        items = value if isinstance(value, (list, tuple)) else [value]
        return [_convert_one(item_type, info, item, param, ctx) for item in items]
    return _convert_one(annotation, info, value, param, ctx)


def _convert_one(annotation: Any, info: ParameterInfo, value: Any, param: _TyperParameter,
                 ctx: Context) -> Any:
    if info.parser is not None:
        return info.parser(value)
    if annotation is str and isinstance(value, str):
        return value
    if annotation is int:
        return _whole_number(info, value)
    if lenient_issubclass(annotation, Path) and info.path_type is None:
        path = annotation(value) if isinstance(value, str) else value
        if isinstance(path, annotation):
            # typer's own path checks (exists, readable, ...), given the value already a Path:
            # making that Path is all typer asks pydantic for.
            return coerce_cli_path(path, info, path_type=annotation, param=param, ctx=ctx)
    raise NotConverted


def _whole_number(info: ParameterInfo, value: Any) -> int:
    """A number written in plain digits, within the parameter's bounds; typer's conversion reads
    every other form (signs, spaces, underscores) and words every complaint."""
    if isinstance(value, bool) or info.clamp:
        raise NotConverted
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit() and len(value) <= MAX_DIGITS):
            raise NotConverted
        value = int(value)
    if not isinstance(value, int):
        raise NotConverted
    if (info.min is not None and value < info.min) or (info.max is not None and value > info.max):
        raise NotConverted
    return value


def quick_conversion(parameter: _TyperParameter,
                     typer_conversion: Callable[[], RuntimeParam]) -> QuickConversion:
    """The conversion of `parameter` that imports pydantic only for what it cannot convert."""
    descriptor = parameter.type_descriptor
    return QuickConversion(descriptor.parameter_info, descriptor.annotation, typer_conversion)


__all__ = ["MAX_DIGITS", "NotConverted", "QuickConversion", "convert", "quick_conversion"]
