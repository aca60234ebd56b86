"""A summed layout's words: the dims a broadcast operand's gradient is summed over, or, where a
batched matmul expands an operand to its own shape, that nothing is summed (the words once read
"before summing over dims the broadcast dims"), on a value still checked against the
hook-free run."""

from __future__ import annotations

import math

import torch
from torch import nn

from gradexplain.api import explain
from gradexplain.records.claims import claim_text
from gradexplain.records.names import Naming


def test_summed_words_name_the_dims_or_say_nothing_is_summed() -> None:
    naming = Naming.of(["v", "b"], whole=False)
    text, latex, _ = claim_text("loss", "b", "summed", (), (0,), naming, False)
    assert text == "∂loss/∂b, before summing over dim 0 (b expanded)"
    text, latex, _ = claim_text("loss", "v", "summed", (), (), naming, False)
    assert "the broadcast dims" not in text and "nothing summed" in text
    assert "nothing summed" in latex


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        weights = ((q @ k.transpose(-2, -1)) / math.sqrt(4)).softmax(-1)
        out: torch.Tensor = weights @ v
        return out


def test_an_expansion_to_its_own_shape_is_checked_and_says_so() -> None:
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)).requires_grad_()
    walk = explain(Attention(), x).walk
    unsummed = [arg for walk_pass in walk.passes for event in walk_pass.events
                for arg in event.args if arg.meaning is not None
                and arg.meaning.layout == "summed" and not arg.meaning.summed_dims]
    assert unsummed  # matmul expanded its 3-D operands to their own shapes
    for arg in unsummed:
        assert arg.meaning is not None and "nothing summed" in arg.meaning.text
        assert arg.value is not None and arg.check is not None and arg.check.verified
    assert walk.failures() == []
