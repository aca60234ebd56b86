"""`render/fit.py`: values laid out in a width without splitting a matrix row, sentences broken
between words, rows of columns. The values are torch tensors made here; what a layout shows is
read back and compared with the tensor itself."""

from __future__ import annotations

import math
import re

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gradexplain.records.trace import TensorValue
from gradexplain.render.fit import name_lines, row_lines, value_lines, word_lines

NUMBER = re.compile(r"-?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf)")
SUMMARY = re.compile(r"(min|max|mean) (\S+)")


def recorded(tensor: torch.Tensor) -> TensorValue:
    """The tensor as a trace records it: shape, dtype, values as nested lists."""
    return TensorValue(tuple(tensor.shape), "float32", tensor.tolist())


def numbers(lines: list[str]) -> torch.Tensor:
    return torch.tensor([float(text) for line in lines for text in NUMBER.findall(line)])


def rows_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1, tensor.shape[-1])


def test_a_value_that_fits_is_one_line() -> None:
    tensor = torch.tensor([[1.5, -2.0], [0.25, 3.0]])
    lines = value_lines(recorded(tensor), 40)
    assert len(lines) == 1
    torch.testing.assert_close(numbers(lines), tensor.flatten())


def test_a_wide_matrix_gets_one_row_per_line() -> None:
    torch.manual_seed(1)
    for shape in [(4, 3), (2, 5), (6, 4)]:
        tensor = torch.randn(shape)
        lines = value_lines(recorded(tensor), 64)
        assert len(lines) == shape[0]
        assert all(len(line) <= 64 for line in lines)
        for line, row in zip(lines, tensor, strict=True):
            # Five significant digits: equal to the tensor's row up to that.
            torch.testing.assert_close(numbers([line]), row, rtol=1e-4, atol=1e-6)


def test_higher_dimensions_keep_each_innermost_row_on_its_line() -> None:
    torch.manual_seed(2)
    for shape in [(1, 4, 2, 2), (2, 3, 4), (3, 1, 2)]:
        tensor = torch.randn(shape)
        lines = value_lines(recorded(tensor), 50)
        assert len(lines) == math.prod(shape[:-1])
        for line, row in zip(lines, rows_of(tensor), strict=True):
            torch.testing.assert_close(numbers([line]), row, rtol=1e-4, atol=1e-6)
            # Brackets balance across the whole value, each line opening its own row.
            assert line.count("[") >= 1 and "]" in line
        assert sum(line.count("[") for line in lines) == sum(line.count("]") for line in lines)


def test_a_row_wider_than_the_width_falls_back_to_the_summary() -> None:
    torch.manual_seed(3)
    for tensor in [torch.randn(16), torch.randn(1, 16), torch.randn(2, 9)]:
        lines = value_lines(recorded(tensor), 30)
        assert all(len(line) <= 30 for line in lines)
        assert lines[0].startswith("[" + ", ".join(str(size) for size in tensor.shape) + "]")
        found = dict(SUMMARY.findall(" ".join(lines)))
        torch.testing.assert_close(float(found["min"]), tensor.min().item(), rtol=1e-4, atol=0.0)
        torch.testing.assert_close(float(found["max"]), tensor.max().item(), rtol=1e-4, atol=0.0)
        torch.testing.assert_close(float(found["mean"]), tensor.mean().item(),
                                   rtol=1e-3, atol=1e-4)


def test_a_summarised_value_breaks_only_between_its_pieces() -> None:
    tensor = torch.randn(32, 256)
    lines = value_lines(recorded(tensor), 26)
    assert lines[0].startswith("[32, 256]")
    for line in lines[1:]:
        assert re.fullmatch(r"(?:(?:min|max|mean|norm) \S+ ?)+", line), line


def test_none_and_scalars() -> None:
    assert value_lines(None, 10) == ["None"]
    lines = value_lines(recorded(torch.tensor(0.18746)), 10)
    torch.testing.assert_close(numbers(lines), torch.tensor([0.18746]))


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).filter(
    lambda shape: math.prod(shape) <= 24)


@settings(max_examples=150, deadline=None)
@given(shape=shapes, width=st.integers(30, 100), seed=st.integers(0, 2**16))
def test_any_small_value_keeps_its_width_and_its_rows(shape: list[int], width: int,
                                                      seed: int) -> None:
    tensor = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    lines = value_lines(recorded(tensor), width)
    assert all(len(line) <= width for line in lines)
    if "min" not in " ".join(lines):  # in full: every row whole, in order
        torch.testing.assert_close(numbers(lines), tensor.flatten(), rtol=1e-4, atol=1e-6)
        if len(lines) > 1:
            assert len(lines) == math.prod(shape[:-1])
    else:  # the summary form, shape first
        assert lines[0].startswith("[" + ", ".join(map(str, shape)) + "]")


def test_word_lines_break_between_words_only() -> None:
    text = "legacy hooks sit on the grad_fn of the module's first output: SigmoidBackward0"
    for width in (16, 20, 33, 80):  # SigmoidBackward0 is 16 wide
        lines = word_lines(text, width)
        assert all(len(line) <= width for line in lines)
        assert " ".join(lines).split() == text.split()
    # A word longer than the width is the one thing cut.
    assert word_lines("∂loss/∂blocks.49.linear.weight", 10) == [
        "∂loss/∂blo", "cks.49.lin", "ear.weight"]
    assert word_lines("", 10) == [""]


def test_row_lines_pad_each_column_and_skip_empty_ones() -> None:
    lines = row_lines([["name"], ["a", "bb"], [], ["[1, 2],", " [3, 4]]"]], [6, 3, 0, 8])
    assert lines == ["name    a    [1, 2],", "        bb    [3, 4]]"]


def test_name_lines_break_after_dots_and_cut_only_what_is_wider_than_a_line() -> None:
    name = "l" * 30 + ".weight.grad ="
    assert name_lines(name, 40) == ["l" * 30 + ".weight.", "grad ="]
    assert name_lines("l" * 25 + ".bias", 10) == ["l" * 10, "l" * 10, "lllll.bias"]
    assert name_lines("x.grad =", 8) == ["x.grad ="]
    for width in (1, 3, 7, 16):
        lines = name_lines("encoder.0.weight.grad =", width)
        assert all(0 < len(line) <= width for line in lines), lines
        assert "".join(lines).replace(" ", "") == "encoder.0.weight.grad="
