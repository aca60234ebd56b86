"""The builds of a Python model share one copy of its parameter and buffer values while no pass
changes them (capture/pool.py): each build still has parameters and buffers of its own, the
user's model is never one of them, tensors sharing memory share it in each build as they do in a
deep copy, and a pass that changes a value, even where torch's version counter does not see it,
leaves the next build the model's own values, as a fresh deep copy would. Values compared with
plain torch (and copy.deepcopy) written here."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from gradexplain import explain
from gradexplain.capture.pymodel import PythonSource, python_source
from tests.helpers.pyoracle import recorded


class Tied(nn.Module):
    """Two layers and an output layer that reuses the first one's weight (weight tying)."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = nn.Linear(4, 4)
        self.hidden = nn.Linear(4, 4)
        self.decode = nn.Linear(4, 4)
        self.decode.weight = self.encode.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.decode(torch.tanh(self.hidden(torch.relu(self.encode(x)))))
        return out


class Drifting(Tied):
    """Tied, whose forward then halves its hidden weight through `.data`: a write torch's
    version counter does not count, so each forward sees other values than the one before."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        self.hidden.weight.data.mul_(0.5)
        return out


def _model(kind: type[Tied]) -> tuple[Tied, torch.Tensor]:
    torch.manual_seed(0)
    model = kind()
    return model, torch.randn(3, 4)


def _built(source: PythonSource) -> Tied:
    model = source.build().model
    assert isinstance(model, Tied)
    return model


def test_builds_share_the_values_but_not_the_parameters() -> None:
    model, x = _model(Tied)
    source = python_source(model, (x,), "Tied")
    first, second = _built(source), _built(source)
    originals = dict(model.named_parameters())
    for name, parameter in first.named_parameters():
        other = dict(second.named_parameters())[name]
        assert parameter is not other and parameter is not originals[name]
        assert parameter.data_ptr() == other.data_ptr() != originals[name].data_ptr()
        assert torch.equal(parameter, originals[name])
    assert first.decode.weight is first.encode.weight  # the tying, kept in each build
    first.hidden.weight.grad = torch.ones(4, 4)
    assert second.hidden.weight.grad is None


def test_a_build_after_a_changed_parameter_has_the_models_values() -> None:
    model, x = _model(Drifting)
    want = model.hidden.weight.detach().clone()
    source = python_source(model, (x,), "Drifting")
    _built(source)(x)  # halves that build's (shared) hidden weight
    rebuilt = _built(source)
    assert torch.equal(rebuilt.hidden.weight, want)
    assert rebuilt.hidden.weight.data_ptr() != model.hidden.weight.data_ptr()


class Normed(nn.Module):
    """A Linear and a batch norm in eval mode (its running statistics are what it computes
    with), a step counter, a shift added to the output held as a non-persistent nn.Buffer (which
    marks the tensor with attributes), and a view of the running mean kept as a plain
    attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.norm.get_buffer("running_mean").uniform_(-1.0, 1.0)
        self.norm.get_buffer("running_var").uniform_(0.5, 2.0)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.shift = nn.Buffer(torch.full((4,), 0.25), persistent=False)
        self.mean_view = self.mean().view(2, 2)
        self.eval()

    def mean(self) -> torch.Tensor:
        return self.norm.get_buffer("running_mean")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.tanh(self.norm(self.linear(x)) + self.get_buffer("shift"))
        return out


class DriftingNorm(Normed):
    """Normed, whose forward then shifts the running mean through `.data` and counts its steps
    in place: each forward after the first computes with other statistics."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        self.mean().data.add_(1.0)
        self.get_buffer("steps").add_(1)
        return out


def _normed(kind: type[Normed]) -> tuple[Normed, torch.Tensor]:
    torch.manual_seed(0)
    model = kind()
    return model, torch.randn(3, 4)


def test_builds_share_buffer_values_but_not_the_buffers() -> None:
    """Each build's buffers are its own tensors on one copy of the values, with what
    copy.deepcopy gives each (an nn.Buffer's marks among them)."""
    model, x = _normed(Normed)
    plain = dict(copy.deepcopy(model).named_buffers())
    source = python_source(model, (x,), "Normed")
    first, second = (source.build().model for _ in range(2))
    originals = dict(model.named_buffers())
    assert set(originals) == {"norm.running_mean", "norm.running_var",
                              "norm.num_batches_tracked", "steps", "shift"}
    for name, buffer in first.named_buffers():
        other = dict(second.named_buffers())[name]
        assert buffer is not other and buffer is not originals[name]
        assert buffer.data_ptr() == other.data_ptr() != originals[name].data_ptr()
        assert torch.equal(buffer, originals[name]) and buffer.dtype == originals[name].dtype
        assert buffer.is_leaf and not buffer.requires_grad
        assert buffer.__dict__ == plain[name].__dict__ and buffer.__dict__ is not other.__dict__
    assert first.get_buffer("shift").__dict__ == {"persistent": False, "_is_buffer": True}


def test_a_view_of_a_buffer_shares_its_builds_memory_as_deepcopy_keeps_it() -> None:
    """copy.deepcopy keeps a tensor attribute that views a buffer's memory viewing the copy's;
    each build does the same with the shared copy."""
    model, x = _normed(Normed)
    plain = copy.deepcopy(model)
    assert plain.mean_view.data_ptr() == plain.mean().data_ptr()
    source = python_source(model, (x,), "Normed")
    for _ in range(2):
        built = source.build().model
        assert isinstance(built, Normed)
        assert built.mean_view.data_ptr() == built.mean().data_ptr()
        assert built.mean_view.data_ptr() != model.mean_view.data_ptr()
        assert torch.equal(built.mean_view, model.mean_view)


def test_buffers_sharing_memory_are_copied_as_deepcopy_copies_them() -> None:
    """Buffers over one block of memory (all of it, or a part): left to deepcopy, which keeps
    them sharing one copy of it; a buffer that requires grad keeps requiring it."""
    model = nn.Linear(2, 2)
    block = torch.arange(4.0)
    model.register_buffer("block_all", block)
    model.register_buffer("grid", block.view(2, 2))
    model.register_buffer("front", block[:2])
    model.register_buffer("learned", torch.ones(2, requires_grad=True))
    plain = copy.deepcopy(model)
    source = python_source(model, (torch.randn(1, 2),), "Linear")
    for _ in range(2):
        built = source.build().model
        for name in ("block_all", "grid", "front", "learned"):
            mine, theirs = built.get_buffer(name), plain.get_buffer(name)
            assert torch.equal(mine, theirs) and mine.requires_grad == theirs.requires_grad
        pointers = {built.get_buffer(name).data_ptr() for name in ("block_all", "grid", "front")}
        assert len(pointers) == 1 and block.data_ptr() not in pointers
        assert built.get_buffer("learned").is_leaf


@pytest.mark.parametrize("make", [
    pytest.param(lambda: _model(Drifting), id="parameters"),
    pytest.param(lambda: _normed(DriftingNorm), id="batch-norm-statistics"),
])
def test_each_pass_of_a_model_that_changes_its_values_starts_from_them(
        make: Callable[[], tuple[nn.Module, torch.Tensor]]) -> None:
    """Every pass and the check run start from the model's values (its parameters, a batch
    norm's running statistics), which each forward changes: each pass's `.grad` is what plain
    torch computes on the first forward of a fresh copy, every check verified, and the user's
    model is as it was."""
    model, x = make()
    before = {name: value.detach().clone() for name, value in model.state_dict().items()}
    plain, plain_x = make()
    plain_x.requires_grad_(True)
    plain(plain_x).sum().backward()
    explanation = explain(model, x)
    assert explanation.failures() == []
    for walk_pass in explanation.walk.passes:
        grads = {grad.name: grad.value for grad in walk_pass.grads}
        for name, parameter in plain.named_parameters():
            assert parameter.grad is not None
            assert torch.allclose(recorded(grads[name]), parameter.grad.double(), rtol=1e-5,
                                  atol=1e-7), (walk_pass.mode, name)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
