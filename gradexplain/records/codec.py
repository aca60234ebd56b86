"""Frozen dataclasses to JSON-able data and back, driven by their type hints. No torch here.

This is what lets a session be captured once and rendered many ways: every stage after the
trace hands over plain frozen dataclasses, so one generic codec saves and loads them all.
Floats that JSON cannot hold (inf, nan) travel as the strings "inf", "-inf" and "nan".
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar, Union

from gradexplain.errors import quoted

T = TypeVar("T")

Path = tuple[str | int, ...]
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class DecodeError(ValueError):
    """Data that does not fit the type it should be; `path` says where in the document."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def to_data(value: Any) -> Any:
    """A dataclass tree as dicts, lists, numbers, strings, booleans and None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_data(getattr(value, field.name))
                for field in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_data(item) for item in value]
    if isinstance(value, frozenset):
        return sorted(to_data(item) for item in value)
    if isinstance(value, dict):
        return {key: to_data(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def from_data(kind: type[T], data: Any) -> T:
    """Rebuild a `kind` from `to_data`'s output; DecodeError names the first thing that does
    not fit."""
    return typing.cast(T, _decode(kind, data, ()))


def _decode(kind: Any, data: Any, path: Path) -> Any:
    if kind is Any:
        return data
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _dataclass(kind, data, path)
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (Union, types.UnionType):
        return _union(args, data, path)
    if origin is typing.Literal:
        if data not in args:
            raise DecodeError(f"expected one of {', '.join(map(repr, args))}, got {_shown(data)}",
                              path)
        return data
    if origin in (tuple, list, frozenset):
        if not isinstance(data, list):
            raise DecodeError(f"expected a list, got {_kind(data)}", path)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(data):
                raise DecodeError(f"expected {len(args)} items, got {len(data)}", path)
            return tuple(_decode(arg, item, (*path, i))
                         for i, (arg, item) in enumerate(zip(args, data, strict=True)))
        items = [_decode(args[0], item, (*path, i)) for i, item in enumerate(data)]
        return origin(items)
    if origin is dict:
        if not isinstance(data, dict):
            raise DecodeError(f"expected a mapping, got {_kind(data)}", path)
        return {key: _decode(args[1], item, (*path, key)) for key, item in data.items()}
    return _scalar(kind, data, path)


def _dataclass(kind: type, data: Any, path: Path) -> Any:
    if not isinstance(data, dict):
        raise DecodeError(f"expected a mapping ({kind.__name__}), got {_kind(data)}", path)
    hints = _hints(kind)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(kind):
        if field.name in data:
            values[field.name] = _decode(hints[field.name], data[field.name], (*path, field.name))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise DecodeError(f"missing key {field.name!r}", path)
    unknown = sorted(set(data) - {field.name for field in dataclasses.fields(kind)})
    if unknown:
        raise DecodeError(f"unknown key {quoted(unknown[0])}", path)
    return kind(**values)


def _union(args: tuple[Any, ...], data: Any, path: Path) -> Any:
    if data is None:
        if type(None) in args:
            return None
        raise DecodeError("expected a value, got null", path)
    if float in args and any(typing.get_origin(arg) is list for arg in args):
        return _nested(data, path)  # a tensor's values: numbers, nested lists of them
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _decode(arg, data, path)
        except DecodeError as error:
            errors.append(error)
    raise errors[-1]


def _nested(data: Any, path: Path) -> Any:
    if isinstance(data, list):
        return [_nested(item, (*path, i)) for i, item in enumerate(data)]
    if isinstance(data, bool | int | float):
        return data
    if isinstance(data, str) and data in _NON_FINITE:
        return _NON_FINITE[data]
    raise DecodeError(f"expected a number or a list, got {_kind(data)}", path)


def _scalar(kind: Any, data: Any, path: Path) -> Any:
    if kind is float:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return float(data)
        if isinstance(data, str) and data in _NON_FINITE:
            return _NON_FINITE[data]
        raise DecodeError(f"expected a number, got {_kind(data)}", path)
    checks: dict[Any, Callable[[Any], bool]] = {
        int: lambda item: isinstance(item, int) and not isinstance(item, bool),
        bool: lambda item: isinstance(item, bool),
        str: lambda item: isinstance(item, str),
    }
    if kind in checks:
        if not checks[kind](data):
            raise DecodeError(f"expected {kind.__name__}, got {_kind(data)}", path)
        return data
    raise DecodeError(f"cannot decode type {kind!r}", path)


@cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _shown(data: Any) -> str:
    """A value a message quotes: text cut short (a 5 MB string is no one-line error), other
    values by their kind."""
    return quoted(data) if isinstance(data, str) else _kind(data)


def _kind(data: Any) -> str:
    if data is None:
        return "null"
    return {dict: "a mapping", list: "a list", str: "text", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(data), type(data).__name__)
