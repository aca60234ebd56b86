"""A label is a claim and its check evaluates the claim (capture/claims.py): corrupt a claim
(another tensor, a dropped restriction, another operand, another layout) and it fails, unless
plain torch, computed here, says the corrupted claim happens to be true as well.

Models are written here; plain torch is the oracle for every value."""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, replace

import pytest
import torch
from torch import nn

from gradexplain.capture.build import Builder, build
from gradexplain.capture.claims import ClaimChecker
from gradexplain.capture.label import EventLabels, label_pass
from gradexplain.capture.pymodel import python_source
from gradexplain.capture.replay import Replay
from gradexplain.capture.trace import trace
from gradexplain.language import load_spec_text
from gradexplain.language.model import ModelSpec
from gradexplain.records.names import Naming
from gradexplain.records.trace import Mode, TensorValue
from gradexplain.records.walk import Layout, Meaning, Use
from tests.helpers.labelcases import CASES, Plain


@dataclass
class Checked:
    """One pass of a model: its labelled events and a checker for claims about them."""

    events: list[EventLabels]
    checker: ClaimChecker

    def verdict(self, claim: Meaning, run: int, value: TensorValue) -> bool:
        result = self.checker.evaluate(claim, run, value)
        assert result.check is not None, result.not_checked
        return result.check.verified

    def labelled(self) -> list[tuple[Meaning, int, TensorValue]]:
        """Every derivative claim with its value, as the pass labelled it."""
        found = []
        for item in self.events:
            for arg, label in zip(item.event.args, item.labels, strict=True):
                if (label.meaning is not None and arg.value is not None
                        and label.meaning.kind == "derivative" and item.event.run > 0):
                    found.append((label.meaning, item.event.run, arg.value))
        return found


def checked(spec: ModelSpec, mode: Mode, make: Builder | None = None) -> Checked:
    fresh = make or (lambda: build(spec))
    traced = trace(fresh(), mode)
    naming = Naming(whole=spec.python is not None)
    view, events = label_pass(traced, naming)
    replay = Replay(spec, traced, view.signature(), make)
    return Checked(events, ClaimChecker(view, replay))


def python_checked(model: nn.Module, mode: Mode, *inputs: torch.Tensor) -> Checked:
    source = python_source(model, inputs, "test_claims.py:model")
    return checked(source.spec, mode, source.build)


def as_tensor(value: TensorValue) -> torch.Tensor:
    assert value.value is not None
    return torch.tensor(value.value, dtype=torch.float64)


def agrees(value: TensorValue, expected: torch.Tensor) -> bool:
    got = as_tensor(value)
    return got.shape == expected.shape and torch.allclose(
        got, expected.detach().double(), rtol=1e-4, atol=1e-6)


# --- another tensor, a dropped restriction, another layout: against plain torch ----------------


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("mode", ["legacy", "full"])
def test_a_claim_about_another_tensor_holds_only_where_plain_torch_agrees(
        case: str, mode: Mode) -> None:
    """Every label rewritten to name each tensor plain torch computed d(out)/d(name) for, as a
    whole and as-is: the checker verifies exactly those rewritten claims whose value plain
    torch gives (and so every corrupted claim that is false fails)."""
    text, oracle = CASES[case]
    plain: Plain = oracle()
    pass_ = checked(load_spec_text(text, f"{case}.yaml"), mode)
    tried = failed = 0
    for claim, run, value in pass_.labelled():
        if claim.runs or run != 1:
            continue
        for name, gradient in plain.named.items():
            if name not in pass_.checker.view.named_positions:
                continue
            mutated = replace(claim, wrt=name, via=(), layout="as-is", summed_dims=())
            truth = agrees(value, gradient)
            assert pass_.verdict(mutated, run, value) == truth, (claim.text, name)
            tried += 1
            failed += not truth
    assert tried and failed, "the case must offer claims to corrupt"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_claim_with_its_restriction_dropped_or_its_layout_changed_fails(case: str) -> None:
    """Restricted claims lose their `via`, transposed ones become as-is (and the reverse):
    on these models each corrupted claim is false (plain torch: the tensor's whole gradient
    differs from the share; a non-symmetric matrix differs from its transpose), so fails."""
    text, oracle = CASES[case]
    plain = oracle()
    pass_ = checked(load_spec_text(text, f"{case}.yaml"), "legacy")
    for claim, run, value in pass_.labelled():
        if claim.via and claim.layout == "as-is" and claim.wrt in plain.named and run == 1:
            assert not agrees(value, plain.named[claim.wrt])  # a share, not the whole
            assert pass_.verdict(claim, run, value)
            assert not pass_.verdict(replace(claim, via=()), run, value), claim.text
        if claim.layout in ("as-is", "transposed") and len(value.shape) == 2:
            matrix = as_tensor(value)
            if matrix.shape[0] == matrix.shape[1] and torch.allclose(matrix, matrix.t()):
                continue
            flipped: Layout = "transposed" if claim.layout == "as-is" else "as-is"
            assert pass_.verdict(claim, run, value) != pass_.verdict(
                replace(claim, layout=flipped), run, value) or not pass_.verdict(
                claim, run, value), claim.text


# --- one op reading a tensor twice: each operand's share ----------------------------------------


class Square(nn.Module):
    """`h * h`: the legacy hook sits on the mul, whose two edges both lead to h."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.lin(x)
        return h * h


class SelfProduct(nn.Module):
    """`h @ h`: two reads of one matrix whose shares differ (g·hᵀ and hᵀ·g)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.lin(x)
        return h @ h


def _model_hook(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What plain torch's legacy hook on the top-level model receives as grad_input."""
    seen: list[tuple[torch.Tensor, ...]] = []
    plain = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's warning about legacy hooks: not the point
        handle = plain.register_backward_hook(
            lambda module, grad_input, grad_output: seen.append(grad_input))
        plain(x).sum().backward()
    handle.remove()
    return seen[0]


def _top_legacy_event(pass_: Checked) -> EventLabels:
    return next(item for item in pass_.events
                if item.event.hook == "backward" and item.event.target == "")


@pytest.mark.parametrize("model_class", [Square, SelfProduct])
def test_each_operand_of_an_op_reading_a_tensor_twice_is_its_own_share(
        model_class: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model = model_class()
    x = torch.randn(3, 3)
    plain_shares = _model_hook(model, x)
    pass_ = python_checked(model, "legacy", x)
    event = _top_legacy_event(pass_)
    claims = [label.meaning for label in event.labels[:2]]
    for operand, (claim, arg, share) in enumerate(
            zip(claims, event.event.args[:2], plain_shares, strict=True)):
        assert claim is not None and arg.value is not None
        assert agrees(arg.value, share)
        (use,) = claim.via
        assert use.operand == operand and f"operand {operand}" in claim.text
        assert pass_.verdict(claim, event.event.run, arg.value)
        # The whole part via the op (both operands) is their sum: false for one share.
        assert not pass_.verdict(replace(claim, via=(Use(use.by),)), event.event.run,
                                 arg.value)
    if model_class is SelfProduct:
        first = event.event.args[0].value
        assert first is not None and claims[1] is not None
        assert not pass_.verdict(claims[1], event.event.run, first)


# --- an expanded parameter: summed over the broadcast dims --------------------------------------


class ClassToken(nn.Module):
    """A ViT-style class token: one parameter expanded over the batch, also used directly."""

    def __init__(self, reuse: bool) -> None:
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, 4))
        self.lin = nn.Linear(4, 4)
        self.reuse = reuse

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        token = self.cls.expand(x.shape[0], -1, -1)
        out: torch.Tensor = self.lin(torch.cat([token, x], dim=1))
        return out * self.cls if self.reuse else out


@pytest.mark.parametrize("reuse", [False, True])
def test_an_expanded_parameter_is_its_expansion_gradient_summed_over_the_batch(
        reuse: bool) -> None:
    torch.manual_seed(0)
    model = ClassToken(reuse)
    x = torch.randn(2, 3, 4)
    plain = copy.deepcopy(model)
    seen: list[torch.Tensor] = []
    token = plain.cls.expand(2, -1, -1)
    token.register_hook(seen.append)
    out = plain.lin(torch.cat([token, x], dim=1))
    (out * plain.cls if reuse else out).sum().backward()
    pass_ = python_checked(model, "legacy", x)
    summed = [(claim, run, value) for claim, run, value in pass_.labelled()
              if claim.layout == "summed"]
    assert summed
    for claim, run, value in summed:
        assert claim.wrt == "cls" and claim.summed_dims == (0,)
        assert agrees(value, seen[0])
        assert pass_.verdict(claim, run, value)
        assert ("only the part via" in claim.text) == reuse
        assert not pass_.verdict(replace(claim, layout="as-is", via=()), run, value)
        assert not pass_.verdict(replace(claim, wrt="lin.weight"), run, value)
        # The dims summed are part of the claim: others fail (they were never checked).
        for dims in ((), (1,), (2,), (1, 2)):  # (0, 1) is (0,): dim 1 has size 1
            assert not pass_.verdict(replace(claim, summed_dims=dims), run, value), dims
