"""Full backward hooks hand each module its tensor arguments as new tensors, so a forward that
tests `a is b` (nn.MultiheadAttention's `query is key is value`) computes another graph under
them. That is a real effect users should see: the walk says so, checks the full pass on a run
with the same (inert) hooks, and labels everything. Plain torch's hooks, registered here, are
the oracle for what each hook receives."""

from __future__ import annotations

import copy
import warnings
from collections import defaultdict

import pytest
import torch
from torch import nn

from gradexplain import explain
from gradexplain.analysis.diff import compare
from gradexplain.records.walk import PassWalk
from gradexplain.render.console import plain_text

Received = dict[str, list[tuple[torch.Tensor | None, ...]]]


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.attn(x, x, x)[0]
        return out


class CrossAttention(nn.Module):
    """`key is value`, not `query is key`: another of MHA's identity tests."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
        self.memory = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        memory = self.memory(x)
        out: torch.Tensor = self.attn(x, memory, memory)[0]
        return torch.tanh(out)


class SameOrNot(nn.Module):
    """The smallest forward that asks whether two arguments are one tensor."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 3 if a is b else a * b


class AsksIdentity(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.same = SameOrNot()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        out: torch.Tensor = self.same(h, h)
        return out


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.tanh(self.lin(x))
        return out


def encoder() -> nn.Module:
    return nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, dropout=0.0, batch_first=True)


MODELS = {
    "self_attention": (SelfAttention, (2, 3, 4)),
    "encoder_layer": (encoder, (2, 3, 4)),
    "cross_attention": (CrossAttention, (2, 3, 4)),
    "asks_identity": (AsksIdentity, (2, 3)),
}


def plain_full_hooks(model: nn.Module, x: torch.Tensor) -> Received:
    """What plain torch's full backward hooks receive, module by module, in firing order."""
    received: Received = defaultdict(list)
    plain = copy.deepcopy(model)
    handles = [module.register_full_backward_hook(
        lambda module, grad_input, grad_output, path=path: received[path].append(
            (*grad_input, *grad_output)))
        for path, module in plain.named_modules()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain(x.detach().clone().requires_grad_(True)).sum().backward()
    for handle in handles:
        handle.remove()
    return received


def recorded(walk_pass: PassWalk, hook: str) -> Received:
    found: Received = defaultdict(list)
    for event in walk_pass.events:
        if event.hook == hook:
            found[event.target].append(tuple(
                None if arg.value is None or arg.value.value is None
                else torch.tensor(arg.value.value) for arg in event.args))
    return found


def assert_same(got: Received, expected: Received) -> None:
    assert sorted(got) == sorted(expected)
    for path, calls in expected.items():
        assert len(got[path]) == len(calls), path
        for mine, theirs in zip(got[path], calls, strict=True):
            assert len(mine) == len(theirs), path
            for value, plain in zip(mine, theirs, strict=True):
                assert (value is None) == (plain is None), path
                if value is not None and plain is not None:
                    torch.testing.assert_close(value, plain.float(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_forward_asking_is_walks_with_every_check_verified(name: str) -> None:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make()
    x = torch.randn(*shape, requires_grad=True)
    result = explain(model, x)
    assert result.failures() == []
    legacy, full = result.walk.passes
    assert legacy.graph_changed is None
    assert full.graph_changed is not None and "changed what the model computes" in (
        full.graph_changed)
    derivatives = [arg for event in full.events for arg in event.args
                   if arg.meaning is not None and arg.value is not None]
    assert derivatives and all(arg.check is not None and arg.check.verified
                               for arg in derivatives)
    assert_same(recorded(full, "full_backward"), plain_full_hooks(model, x))


def test_a_model_the_full_hooks_do_not_change_says_nothing_of_it() -> None:
    torch.manual_seed(0)
    result = explain(Plain(), torch.randn(2, 3))
    assert [walk_pass.graph_changed for walk_pass in result.walk.passes] == [None, None]


def test_the_change_is_shown_in_text_markdown_and_json() -> None:
    torch.manual_seed(0)
    result = explain(AsksIdentity(), torch.randn(2, 3))
    note = result.walk.passes[1].graph_changed
    assert note is not None
    assert result.json()["passes"][1]["graph_changed"] == note
    assert "changed what the model computes" in result.markdown()
    assert "changed what the model computes" in " ".join(plain_text(result.text()).split())
    assert compare(result.session).graph_changed == note
    assert "changed what the model computes" in result.report()
