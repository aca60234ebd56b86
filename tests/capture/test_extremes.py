"""A summary's extremes (capture/values.py `extremes`) read in memory order where the layout is
another order, bit for bit what torch.aminmax gives in the layout: the zero's sign and the nan
included."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gradexplain.capture.values import extremes, tensor_value, value_limit
from gradexplain.records.trace import TensorValue
from tests.helpers.summaries import assert_summary_is_torchs


@settings(max_examples=200, deadline=None)
@given(numbers=st.lists(st.sampled_from([0.0, -0.0, 1.5, -2.0, 1e-300, math.inf, -math.inf,
                                         math.nan]) | st.floats(), min_size=24, max_size=24),
       order=st.permutations([0, 1, 2]))
def test_extremes_are_aminmax_bit_for_bit(numbers: list[float], order: list[int]) -> None:
    """Read in memory order for another layout, the extremes are torch.aminmax's in that
    layout, to the sign of a zero and the bits of a nan."""
    values = torch.tensor(numbers, dtype=torch.float64).reshape(2, 3, 4).permute(order)
    for layout in (values, values.contiguous(), values.transpose(0, 2)):
        got, expected = extremes(layout), torch.aminmax(layout)
        for mine, torchs in zip(got, expected, strict=True):
            assert mine.view(torch.int64).item() == torchs.view(torch.int64).item()


@pytest.mark.parametrize("seed", range(12))
def test_extremes_keep_the_zero_torch_gives_in_the_layout(seed: int) -> None:
    """Positive values and a few zeros of both signs, transposed: read in another order,
    aminmax often gives the other zero, so extremes gives torch's in the layout."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.rand(64, 64, dtype=torch.float64, generator=generator) + 1.0
    places = torch.randint(0, 64, (6, 2), generator=generator).tolist()
    for number, (row, column) in enumerate(places):
        values[row, column] = -0.0 if number % 2 else 0.0
    layout = values.t()
    got, expected = extremes(layout), torch.aminmax(layout)
    for mine, torchs in zip(got, expected, strict=True):
        assert mine.view(torch.int64).item() == torchs.view(torch.int64).item()


def summary_of(tensor: torch.Tensor) -> TensorValue | None:
    with value_limit(4):
        return tensor_value(tensor)


@settings(max_examples=150, deadline=None)
@given(numbers=st.lists(st.sampled_from([0.0, -0.0, 1.5, -2.0, 3e-39, 70000.0, math.inf,
                                         -math.inf, math.nan]) | st.floats(),
                        min_size=24, max_size=24),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
       order=st.permutations([0, 1, 2]))
def test_a_narrower_floats_summary_is_its_float64_copys(numbers: list[float],
                                                         dtype: torch.dtype,
                                                         order: list[int]) -> None:
    """A float32, float16 or bfloat16 tensor's summary (its extremes read from the tensor
    itself, not its float64 copy) is what torch computes on the float64 copy in the tensor's
    layout: the extremes bit for bit, zeros of either sign and nans included."""
    values = torch.tensor(numbers, dtype=dtype).reshape(2, 3, 4).permute(order)
    for layout in (values, values.contiguous(), values.transpose(0, 2)):
        assert_summary_is_torchs(summary_of(layout), layout)
