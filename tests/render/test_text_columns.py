"""`render/text_columns.py`: a timeline row laid out whatever its name and meaning hold. A name or
a word of a meaning wider than the line (a module named with 100 characters and more) gives way
to the value: no failure, the mark on the value's last line, nothing over the width that a
layout could keep within, and the value's numbers all there. Values are torch tensors made here
and read back from the lines."""

from __future__ import annotations

import re

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text

from gradexplain.records.trace import TensorValue
from gradexplain.render import text_columns
from gradexplain.render.fit import value_lines
from gradexplain.render.text_columns import Columns, Row, row_texts

MIN_MEANING, MIN_NAME, MIN_VALUE = (text_columns.MIN_MEANING, text_columns.MIN_NAME,
                                    text_columns.MIN_VALUE)

NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+(?:e[-+]?\d+)?")


def recorded(tensor: torch.Tensor) -> TensorValue:
    return TensorValue(tuple(tensor.shape), "float32", tensor.tolist())


def value_column(lines: list[str], start: int) -> list[str]:
    """What each line holds from the value column on, the mark dropped."""
    return [line[start:].replace("✓", "") for line in lines]


@settings(max_examples=200, deadline=None)
@given(name=st.integers(1, 400), word=st.integers(0, 400), width=st.integers(60, 160),
       rows=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_a_long_name_or_word_gives_way_to_the_value(name: int, word: int, width: int,
                                                    rows: int, seed: int) -> None:
    tensor = torch.randn(rows, 3, generator=torch.Generator().manual_seed(seed))
    meaning = f"∂loss/∂{'Q' * word} of the layer" if word else ""
    row = Row("Z" * name, meaning, recorded(tensor), Text("✓"))
    columns = Columns.of([row])
    name_width, meaning_width, value_width = columns.widths(width)
    # The value's least room, unless name and meaning have none left to give.
    assert value_width >= min(MIN_VALUE, columns.value) or (
        name_width <= max(MIN_NAME, name) and meaning_width <= MIN_MEANING)
    if width >= 100:
        assert value_width >= min(MIN_VALUE, columns.value)
    lines = [text.plain for text in row_texts(row, columns, width)]
    assert all(len(line) <= width for line in lines), (width, [len(line) for line in lines])
    # The mark on the value's last line; the value as value_lines lays it out in its column.
    value = value_lines(recorded(tensor), value_width)
    assert lines[len(value) - 1].endswith("✓")
    assert sum(line.endswith("✓") for line in lines) == 1
    start = name_width + 2 + (meaning_width + 2 if meaning_width else 0)
    shown = "\n".join(value_column(lines, start))
    assert "Z" not in shown and "Q" not in shown  # names and meanings stay in their columns
    if "min" not in shown:
        numbers = torch.tensor([float(text) for text in NUMBER.findall(shown)])
        torch.testing.assert_close(numbers, tensor.flatten(), rtol=1e-4, atol=1e-6)
    # All of the name is there, cut into its column's lines.
    assert "".join(line[:name_width].strip() for line in lines) == "Z" * name


def test_a_narrow_width_still_lays_a_row_out() -> None:
    # Narrower than name, meaning and value can share: lines may be wider, but nothing fails
    # and the mark still follows the value.
    row = Row("Z" * 150, "∂loss/∂" + "Q" * 150, recorded(torch.ones(2, 2)), Text("✓"))
    for width in (1, 10, 30, 45):
        lines = [text.plain for text in row_texts(row, Columns.of([row]), width)]
        assert sum(line.endswith("✓") for line in lines) == 1, (width, lines)
