"""The text timeline at 100 columns, colour off: no line over the width, no check mark alone on a
line, no matrix row split across lines, and one set of columns per pass (the marks line up from
the first event to the last). Example specs and small Python models built here; the values a
matrix row shows are compared with the gradients plain PyTorch computes in the test."""

from __future__ import annotations

import copy
import functools
import re

import pytest
import torch
from torch import nn

from gradexplain.capture.pipeline import capture
from gradexplain.capture.pymodel import python_source
from gradexplain.records.walk import Walk
from gradexplain.render.console import plain_text
from gradexplain.render.text_walk import walk_text
from tests.helpers.capture import captured

WIDTH = 100
SPECS = ["two_modules.yaml", "cnn_hooks.yaml", "cam_capture.yaml", "column_backward.yaml",
         "multi_output.yaml", "embedding.yaml"]
# An innermost row of numbers opening: `[0.5`, `[-1`, `[nan`.
ROW_OPENS = re.compile(r"\[(?=-?(?:\d|nan|inf))")
NUMBER = re.compile(r"-?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf)")


class Wide(nn.Module):
    """Matrix gradients of 12 to 24 elements: too wide for one line, short enough in full."""

    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.fc2(self.act(self.fc1(x)))
        return result


def models() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    generator = torch.Generator().manual_seed(7)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        return {
            "wide_4x3": (Wide(3, 4), torch.randn(2, 3, generator=generator)),
            "wide_6x4": (Wide(4, 6), torch.randn(3, 4, generator=generator)),
            "conv": (nn.Sequential(nn.Conv2d(1, 2, 2), nn.ReLU(), nn.Flatten(),
                                   nn.Linear(8, 3)), torch.randn(1, 1, 3, 3,
                                                                 generator=generator)),
        }


@functools.cache
def model_walk(name: str) -> Walk:
    model, inputs = models()[name]
    source = python_source(model, (inputs,), f"test:{name}")
    return capture(source.spec, f"test:{name}", source.description, source.build).walk


def walk_of(case: str) -> Walk:
    return captured(case).walk if case.endswith(".yaml") else model_walk(case)


CASES = SPECS + sorted(models())


def timeline_sections(text: str) -> list[list[str]]:
    """Each pass's lines, from its title to the line before the next pass or the verdict."""
    lines = text.splitlines()
    starts = [index for index, line in enumerate(lines)
              if line.startswith(("legacy pass:", "full pass:"))]
    ends = [*starts[1:], len(lines) - 1]
    return [lines[start:end] for start, end in zip(starts, ends, strict=True)]


def split_rows(lines: list[str]) -> list[str]:
    """Lines where a row of numbers opens and does not close before the line ends."""
    found = []
    for line in lines:
        for opening in ROW_OPENS.finditer(line):
            rest = line[opening.end():]
            closes, opens = rest.find("]"), rest.find("[")
            if closes == -1 or -1 < opens < closes:
                found.append(line)
                break
    return found


@pytest.mark.parametrize("case", CASES)
def test_text_fits_100_columns_without_lone_marks(case: str) -> None:
    text = plain_text(walk_text(walk_of(case), timeline=True), WIDTH)
    lines = text.splitlines()
    assert [line for line in lines if len(line) > WIDTH] == []
    assert [line for line in lines if line.strip() in ("✓", "✗")] == []


@pytest.mark.parametrize("case", CASES)
def test_timeline_rows_stay_whole_and_marks_line_up(case: str) -> None:
    walk = walk_of(case)
    sections = timeline_sections(plain_text(walk_text(walk, timeline=True), WIDTH))
    assert len(sections) == len(walk.passes)
    for walk_pass, lines in zip(walk.passes, sections, strict=True):
        assert split_rows(lines) == []
        final = lines.index("final .grad of every leaf") if walk_pass.grads else len(lines)
        # One column of marks for every argument of the pass, another for the final grads.
        for part in (lines[1:final], lines[final:]):
            columns = {line.index("✓") for line in part if line.endswith("✓")}
            assert len(columns) <= 1, columns
        verified = sum(1 for event in walk_pass.events for arg in event.args
                       if arg.check is not None and arg.check.verified)
        verified += sum(1 for grad in walk_pass.grads
                        if grad.check is not None and grad.check.verified
                        and grad.modified_by is None)
        assert sum(line.endswith("✓") for line in lines) == verified


@pytest.mark.parametrize("name", ["wide_4x3", "wide_6x4"])
def test_a_matrix_grad_prints_one_row_per_line_with_torchs_values(name: str) -> None:
    model, inputs = models()[name]
    reference = copy.deepcopy(model)
    assert isinstance(reference, Wide)
    reference(inputs.clone().requires_grad_(True)).sum().backward()
    expected = reference.fc1.weight.grad
    assert expected is not None
    text = plain_text(walk_text(model_walk(name), timeline=True), WIDTH)
    for section in timeline_sections(text):
        start = next(index for index, line in enumerate(section)
                     if line.lstrip().startswith("fc1.weight.grad ="))
        rows = section[start:start + expected.shape[0]]
        for line, row in zip(rows, expected, strict=True):
            value = line.split("=", 1)[1] if "=" in line else line
            shown = torch.tensor([float(number) for number in NUMBER.findall(value)])
            torch.testing.assert_close(shown, row, rtol=1e-4, atol=1e-6)
        assert rows[-1].endswith("✓")
