"""A JSON golden file compared as data, the way another CPU can change it: the golden-file
counterpart of `printed.py` for documents that hold full-precision values.

Keys, strings, booleans, nulls and integers must be equal. A list of numbers is one tensor's
values: float32 rounding in another order moves each of them by a little of the tensor's largest
value (a gradient summed from terms near 1 that cancel to 3e-4 keeps their rounding), so each
must agree within `RELATIVE` of the largest |value| in the golden list, or be below the noise
floor, as the label checks compare a tensor. A number standing alone agrees by `close_enough`.
Nothing here imports gradexplain or torch.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tests.helpers.printed import NOISE_FLOOR, RELATIVE, close_enough


def json_mismatch(expected: str, got: str) -> str | None:
    """None when the JSON text `got` holds the document of the golden `expected` by the rules
    above; else where they first differ (a key path such as `$.passes[0].events[3]`) and how."""
    return _difference(json.loads(expected), json.loads(got), "$")


def _difference(want: Any, have: Any, path: str) -> str | None:
    if _is_real(want) and _is_real(have):
        return None if _number_agrees(want, have, None) else f"{path}: {have!r} is not {want!r}"
    if type(want) is not type(have):
        return f"{path}: {type(have).__name__} where the golden file has {type(want).__name__}"
    if isinstance(want, dict):
        if list(want) != list(have):
            return f"{path}: keys {list(have)} are not {list(want)}"
        for key in want:
            found = _difference(want[key], have[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(want, list):
        if len(want) != len(have):
            return f"{path}: {len(have)} items where the golden file has {len(want)}"
        numbers = _flat_numbers(want)
        if numbers is not None and _flat_numbers(have) is not None and numbers:
            scale = max(abs(number) for number in numbers if math.isfinite(number)) \
                if any(math.isfinite(number) for number in numbers) else 0.0
            for index, (one, other) in enumerate(zip(numbers, _flat_numbers(have) or [],
                                                     strict=True)):
                if not _number_agrees(one, other, scale):
                    return f"{path}: value {index}: {other!r} is not {one!r} (scale {scale:g})"
            return None
        for index, (one, other) in enumerate(zip(want, have, strict=True)):
            found = _difference(one, other, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    return None if want == have else f"{path}: {have!r} is not {want!r}"


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_agrees(want: float, have: float, scale: float | None) -> bool:
    """Integers exactly; a float alone by `close_enough`; a tensor's within its scale."""
    if isinstance(want, int) and isinstance(have, int):
        return want == have
    if scale is None or not (math.isfinite(want) and math.isfinite(have)):
        return close_enough(float(have), float(want))
    return abs(have - want) <= max(RELATIVE * scale, NOISE_FLOOR)


def _flat_numbers(value: list[Any]) -> list[float] | None:
    """A nested list's numbers in order, if it holds numbers only (one tensor's values)."""
    flat: list[float] = []
    for item in value:
        if isinstance(item, list):
            inner = _flat_numbers(item)
            if inner is None:
                return None
            flat += inner
        elif _is_real(item):
            flat.append(item)
        else:
            return None
    return flat
