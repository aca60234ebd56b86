"""The one number formatter: every number the text output shows goes through `fmt`, so the same
run always prints the same characters. Torch-free and beside the records, not in render/: a
lesson's record holds sentences with numbers in them (capture writes those), and the renderers
show the rest, so both layers format through this module."""

from __future__ import annotations

import math

from gradexplain.records.trace import Nested, TensorValue

# Tensors with more elements than this are shown as a summary in text output.
TEXT_ELEMENTS = 24


def fmt(number: float | int | bool) -> str:
    """Five significant digits, no trailing zeros, `-0` shown as `0`: 0.18746, -0.0412, 6."""
    if isinstance(number, bool):
        return str(number).lower()
    if isinstance(number, int):
        return str(number)
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    text = f"{number:.5g}"
    return "0" if text == "-0" else text


def fmt_nested(value: Nested) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(fmt_nested(item) for item in value) + "]"
    return fmt(value)


def fmt_shape(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(str(size) for size in shape) + "]"


def shape_label(value: TensorValue) -> str:
    """`shape [2]` or `scalar`; `summary` where fmt_value summarises (it names the shape)."""
    if value.value is None or math.prod(value.shape) > TEXT_ELEMENTS:
        return "summary"
    return f"shape {fmt_shape(value.shape)}" if value.shape else "scalar"


def fmt_value(value: TensorValue | None, limit: int = TEXT_ELEMENTS) -> str:
    """A tensor in full up to `limit` elements, else its shape and summary; None as `None`."""
    if value is None:
        return "None"
    count = math.prod(value.shape)
    if value.value is not None and count <= limit:
        return fmt_nested(value.value)
    return " ".join(summary_parts(value))


def summary_parts(value: TensorValue) -> list[str]:
    """The summary form fmt_value shows, in the pieces a line may break between: the shape,
    then `min …`, `max …`, `mean …` and (where recorded) `norm …`."""
    parts = [fmt_shape(value.shape)]
    if value.summary is not None:
        summary = value.summary
        return parts + [f"min {fmt(summary.min)}", f"max {fmt(summary.max)}",
                        f"mean {fmt(summary.mean)}", f"norm {fmt(summary.norm)}"]
    flat = _flatten(value.value)
    mean = sum(flat) / len(flat) if flat else 0.0
    return parts + [f"min {fmt(min(flat, default=0.0))}", f"max {fmt(max(flat, default=0.0))}",
                    f"mean {fmt(mean)}"]


def _flatten(value: Nested | None) -> list[float]:
    if value is None:
        return []
    if not isinstance(value, list):
        return [float(value)]
    # A tensor's lists nest evenly: one level flattened at a time, not one call per number
    # (the text timeline summarises tens of thousands of values).
    flat: list[Nested] = value
    try:
        while flat and isinstance(flat[0], list):
            flat = [item for part in flat for item in part]  # type: ignore[union-attr]
        return [float(item) for item in flat]  # type: ignore[arg-type]
    except TypeError:  # lists nested unevenly (never a tensor's): one by one
        return [number for part in value for number in _flatten(part)]
