"""The builds of a Python model share one copy of its parameter values while no pass changes them
(capture/pool.py): each build still has parameters of its own, the user's model is never one of
them, and a pass that changes a parameter, even where torch's version counter does not see it,
leaves the next build the model's own values, as a fresh deep copy would. Values compared with
plain torch written here."""

from __future__ import annotations

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


def test_each_pass_of_a_model_that_changes_its_parameters_starts_from_its_values() -> None:
    """Every pass and the check run start from the model's values: each pass's `.grad` is
    what plain torch computes on the first forward of a fresh copy, every check verified, and
    the user's model is as it was."""
    model, x = _model(Drifting)
    before = {name: value.detach().clone() for name, value in model.state_dict().items()}
    plain, plain_x = _model(Drifting)
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
