"""A deep model's text at several depths: what each fold note says it hides is what is missing
from the printed timeline, and torch's warning is printed once per pass with the modules it came
from. Models are built here; torch itself says (in the test) which modules warn."""

from __future__ import annotations

import copy
import functools
import re
import warnings

import pytest
import torch
from torch import nn

from gradexplain.capture.pipeline import capture
from gradexplain.capture.pymodel import python_source
from gradexplain.records.walk import LabelledEvent, PassWalk, Walk
from gradexplain.render.console import plain_text
from gradexplain.render.markdown_walk import walk_markdown
from gradexplain.render.text_walk import walk_text

DEPTHS = [7, 12, 20]
NOTE = re.compile(r"  ⋯ (?:blocks (\d+)–(\d+)|block (\d+))(?: and parts of ([\d–, ]+))? folded: ")
HEAD = re.compile(r"^ *(\d+) \w+ ", flags=re.MULTILINE)


class Plain(nn.Module):
    """Linear then ReLU, as in examples/models.py:make_deep."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.act(self.linear(x))
        return result


class Residual(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = x + self.act(self.linear(x))
        return result


KINDS = {"plain": Plain, "residual": Residual}


def build(kind: str, depth: int) -> tuple[nn.Module, torch.Tensor]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(depth)
        model = nn.Sequential(*[KINDS[kind](3) for _ in range(depth)])
        return model, torch.randn(2, 3)


@functools.cache
def deep(kind: str, depth: int) -> Walk:
    model, inputs = build(kind, depth)
    source = python_source(model, (inputs,), f"test:{kind}{depth}")
    return capture(source.spec, f"test:{kind}{depth}", source.description, source.build).walk


def block_of(event: LabelledEvent) -> int | None:
    """The block a module or tensor hook's target is in (`3.linear`, `3`, `3.act:relu`)."""
    found = re.match(r"(\d+)(?:[.:]|$)", event.target)
    return None if found is None else int(found.group(1))


def mentions(event: LabelledEvent, block: int) -> bool:
    """Whether the event's target or an argument's meaning names a tensor of `block`."""
    texts = [event.target] + [arg.meaning.text for arg in event.args if arg.meaning is not None]
    return any(re.search(rf"(?<![\w.]){block}[.:]", text) or text == str(block)
               for text in texts)


def pass_texts(text: str) -> list[str]:
    starts = [match.start() for match in re.finditer(r"^(legacy|full) pass:", text, re.M)]
    return [text[start:end] for start, end in zip(starts, [*starts[1:], len(text)], strict=True)]


def notes_with_hidden(walk_pass: PassWalk, text: str) -> list[tuple[re.Match[str], list[int]]]:
    """Each fold note of the pass's text with the seqs of the events between the printed events
    just before and after it."""
    found = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        note = NOTE.match(line)
        if note is None:
            continue
        before = [int(m.group(1)) for m in HEAD.finditer("\n".join(lines[:index]))]
        after = [int(m.group(1)) for m in HEAD.finditer("\n".join(lines[index + 1:]))]
        low, high = before[-1], after[0]
        found.append((note, [event.seq for event in walk_pass.events if low < event.seq < high]))
    return found


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("depth", DEPTHS)
def test_fold_notes_name_exactly_the_blocks_they_hide(kind: str, depth: int) -> None:
    walk = deep(kind, depth)
    text = plain_text(walk_text(walk, timeline=True))
    for walk_pass, section in zip(walk.passes, pass_texts(text), strict=True):
        printed = {int(seq) for seq in HEAD.findall(section)}
        notes = notes_with_hidden(walk_pass, section)
        assert len(notes) == 2  # forward and backward
        for note, hidden_seqs in notes:
            first, last, single, parts_text = note.groups()
            whole = (range(int(single), int(single) + 1) if single
                     else range(int(first), int(last) + 1))
            parts = set()
            for piece in parts_text.split(", ") if parts_text else []:
                low, _, high = piece.partition("–")
                parts |= set(range(int(low), int(high or low) + 1))
            hidden = [event for event in walk_pass.events if event.seq in hidden_seqs]
            phase = hidden[0].phase
            same_phase = [event for event in walk_pass.events if event.phase == phase]
            for block in whole:
                # All of it hidden: no event of that block printed in this phase.
                mine = [event for event in same_phase if block_of(event) == block]
                assert mine and not {event.seq for event in mine} & printed, (block, note[0])
            for block in parts:
                # In part: something about it hidden (a node hook's arguments name it), and
                # something shown.
                assert any(mentions(event, block) for event in hidden), (block, note[0])
                assert any(mentions(event, block) for event in same_phase
                           if event.seq in printed), (block, note[0])
            assert {block_of(event) for event in hidden} - {None} <= set(whole) | parts
            # The first and last blocks are always shown.
            assert 0 not in whole and depth - 1 not in whole


def torch_warnings(model: nn.Module, inputs: torch.Tensor) -> list[str]:
    """The messages torch gives with a legacy backward hook on every module of a copy."""
    model = copy.deepcopy(model)
    for module in model.modules():
        module.register_backward_hook(lambda *args: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(inputs.clone().requires_grad_(True)).sum().backward()
    return [str(item.message) for item in caught if item.category is FutureWarning]


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_warning_is_printed_once_with_its_modules(depth: int) -> None:
    model, inputs = build("plain", depth)
    messages = torch_warnings(model, inputs)
    assert len(set(messages)) == 1
    message = messages[0]
    walk = deep("plain", depth)
    text = plain_text(walk_text(walk))
    flat = " ".join(text.split())
    # Once in all: only the legacy pass gets it.
    assert flat.count(" ".join(message.split())) == 1
    # Every module torch warned for, one line: the linears, the blocks and the model.
    assert len(messages) == 2 * depth + 1
    assert (f"from {len(messages)} modules: 0.linear … {depth - 1}.linear ({depth}), "
            f"0 … {depth - 1} ({depth}) and the model:") in flat
    markdown = walk_markdown(walk)
    assert markdown.count(message) == 1
    assert f"{len(messages)} modules: 0.linear … {depth - 1}.linear ({depth})" in markdown
