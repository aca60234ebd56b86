"""Models from the families people hook, written here, walked whole: ResNet (in-place as
torchvision ships it), attention, RNNs, norm/dropout/embedding, module structure, in-place ops,
double use, and the shapes of models posted in PyTorch issues. For each: no check fails, no two
tensors share a name and no tensor has two, and every module backward hook gradexplain records
holds what plain torch's own hook receives (torch, run here, is the oracle)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain import explain
from gradexplain.threads import torch_threads
from tests.helpers.naming import assert_names_unique
from tests.helpers.pins import pin_problems
from tests.helpers.pymodels import SelfAttention
from tests.helpers.pyoracle import assert_module_hooks_match, hook_calls, seeded
from tests.helpers.resnet import make_resnet18


class TinyViT(nn.Module):
    """A class token expanded over the batch, a position embedding, one encoder layer."""

    def __init__(self) -> None:
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, 4))
        self.pos = nn.Parameter(torch.randn(1, 3, 4))
        self.encoder = nn.TransformerEncoderLayer(4, 2, 8, 0.0, batch_first=True)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        out: torch.Tensor = self.head(self.encoder(tokens)[:, 0])
        return out


class LoopedRNN(nn.Module):
    """An RNN cell written out over time steps: the same layers called at every step."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(3, 4)
        self.rec = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[0], 4)
        outputs = []
        for step in range(x.shape[1]):
            h = torch.tanh(self.inp(x[:, step]) + self.rec(h))
            outputs.append(self.out(h) * (step + 1))
        return torch.stack(outputs, dim=1)


class LSTMHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True)
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.lstm(x)[0][:, -1])
        return out


class EmbedNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.batch_norm = nn.BatchNorm1d(4)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 2)

    def forward(self, tokens: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # A layer after each norm: a plain sum of a norm's output has (nearly) zero gradient,
        # rounding noise that would compare nothing.
        h = torch.tanh(self.batch_norm(self.embed(tokens).sum(1) + x))
        out: torch.Tensor = self.head(self.norm(h) * h)
        return out


class Shared(nn.Module):
    """One layer called three times, once on its own output."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.layer(torch.relu(self.layer(x))) + self.layer(x)
        return out


class DictHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 3)
        self.cls = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.relu(self.body(x))
        return {"logits": self.cls(h), "features": h}


class DoubleUse(nn.Module):
    """A tensor read twice by one op, twice by another, and once more."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.layer(x)
        return h * h + h @ h + h


class InplaceResidual(nn.Module):
    """pytorch#61519's shape: ReLU(inplace=True) and a residual `+=` on a layer's output."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(self.first(x))
        out = self.second(out)
        out += x
        result: torch.Tensor = self.act(out)
        return result


class TwoInputs(nn.Module):
    """pytorch#86051's question: an input without grad, and what legacy grad_input holds."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.layer(x) * mask
        return out


def grad(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).requires_grad_()


@dataclass(frozen=True)
class Family:
    make: Callable[[], nn.Module]
    inputs: Callable[[], tuple[torch.Tensor, ...]]
    output: Any = None
    # The passes compared with plain torch's hooks on every module: not the full pass of a
    # model torch refuses full hooks on in places (tests/capture/test_inplace.py covers it).
    compare: tuple[str, ...] = ("legacy", "full")
    loss: Callable[[Any], torch.Tensor] = field(default=lambda output: output.sum())


FAMILIES = {
    # Its activations are above the value limit (recorded as summaries): its legacy hooks are
    # compared with plain torch's by summary in tests/capture/test_inplace.py.
    "resnet18_as_shipped": Family(make_resnet18, lambda: (grad(2, 3, 32, 32),), compare=()),
    "self_attention": Family(SelfAttention, lambda: (grad(2, 3, 4),)),
    "encoder_layer": Family(lambda: nn.TransformerEncoderLayer(4, 2, 8, 0.0, batch_first=True),
                            lambda: (grad(2, 3, 4),)),
    "tiny_vit": Family(TinyViT, lambda: (grad(2, 2, 4),)),
    "looped_rnn": Family(LoopedRNN, lambda: (grad(2, 5, 3),)),
    "lstm_head": Family(LSTMHead, lambda: (grad(2, 4, 3),)),
    "gru_hidden": Family(lambda: nn.GRU(3, 4), lambda: (grad(5, 2, 3),), output=1,
                         loss=lambda output: output[1].sum()),
    "embed_norm": Family(EmbedNorm, lambda: (torch.randint(0, 10, (4, 2)), grad(4, 4))),
    "shared_layer": Family(Shared, lambda: (grad(2, 3),)),
    "dict_heads": Family(DictHeads, lambda: (grad(2, 3),), output="logits",
                         loss=lambda output: output["logits"].sum()),
    "double_use": Family(DoubleUse, lambda: (grad(3, 3),)),
    "inplace_residual": Family(InplaceResidual, lambda: (grad(2, 4),), compare=("legacy",)),
    "input_without_grad": Family(TwoInputs, lambda: (grad(2, 3), torch.rand(2, 3))),
}


@dataclass
class Walked:
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    result: Any


_walked: dict[str, Walked] = {}


def walked(name: str) -> Walked:
    if name not in _walked:
        family = FAMILIES[name]
        with seeded():
            model = family.make()
            inputs = family.inputs()
        options = {} if family.output is None else {"output": family.output}
        _walked[name] = Walked(model, inputs, explain(model, *inputs, **options))
    return _walked[name]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_check_holds_and_every_name_is_one_tensors(name: str) -> None:
    result = walked(name).result
    assert result.failures() == []
    assert_names_unique(result.session)
    derivatives = [arg for walk_pass in result.walk.passes for event in walk_pass.events
                   for arg in event.args if arg.meaning is not None and arg.value is not None]
    assert derivatives and all(arg.check is not None or arg.meaning.modified
                               for arg in derivatives)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_module_hooks_hold_what_plain_torch_gives(name: str) -> None:
    family, done = FAMILIES[name], walked(name)
    for mode in family.compare:
        inputs: Sequence[torch.Tensor] = [tensor.detach().clone().requires_grad_(
            tensor.requires_grad) for tensor in done.inputs]
        # One thread, as gradexplain runs torch: a batch norm's sums in another order differ
        # in the last bits, which its backward magnifies.
        with torch_threads(1):
            expected = hook_calls(copy.deepcopy(done.model), inputs, mode, family.loss)
        assert_module_hooks_match(done.result.walk, mode, expected)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_hook_argument_is_pinned_to_its_step(name: str) -> None:
    """Each labelled argument sits at the chain-rule step with its derivative and value (a
    share at the share of the use it names), in every family (tests/helpers/pins.py)."""
    assert pin_problems(walked(name).result.session) == []
