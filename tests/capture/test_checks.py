"""The checks against the hook-free run (capture/checks.py) can fail: on a wrong value, a wrong
shape, a wrong label, and on tiny gradients of another tensor."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gradexplain.capture.checks import check
from gradexplain.capture.claims import ClaimChecker, Evaluated
from gradexplain.capture.label import label_pass
from gradexplain.capture.replay import Replay
from gradexplain.language import load_spec
from gradexplain.records.names import Naming
from gradexplain.records.trace import TensorValue
from tests.helpers.capture import trace_both
from tests.helpers.cli import SPECS

TWO_MODULES = SPECS / "two_modules.yaml"


def test_check_fails_on_a_wrong_value_and_a_wrong_shape() -> None:
    right = torch.tensor([0.5, -1.0])
    assert check(TensorValue((2,), "float32", [0.5, -1.0]), right).verified
    wrong = check(TensorValue((2,), "float32", [0.5, -0.9]), right)
    assert not wrong.verified and wrong.max_abs_err == pytest.approx(0.1)
    assert not check(TensorValue((1, 2), "float32", [[0.5, -1.0]]), right).verified
    assert not check(None, right).verified


def test_a_wrong_label_fails_its_check() -> None:
    """Swap two claims (dz/dp and dz/dx) and the hook-free run must disagree; so must a
    transposed claim about a weight's own gradient."""
    spec = load_spec(TWO_MODULES)
    legacy, _ = trace_both(spec)
    view, events = label_pass(legacy, Naming())
    replay = Replay(spec, legacy, view.signature())
    checker = ClaimChecker(view, replay)
    mul = next(item for item in events
               if item.event.hook == "backward" and item.event.target == "module")
    claim_p, claim_x = mul.labels[0].meaning, mul.labels[1].meaning
    assert claim_p is not None and claim_x is not None
    value_p = mul.event.args[0].value
    assert value_p is not None
    assert _verified(checker.evaluate(claim_p, mul.event.run, value_p))
    assert not _verified(checker.evaluate(claim_x, mul.event.run, value_p))
    weight = next(item for item in events if item.event.hook == "tensor"
                  and item.event.target == "module2.l.weight")
    weight_value = weight.event.args[0].value
    weight_claim = weight.labels[0].meaning
    assert weight_value is not None and weight_claim is not None
    assert _verified(checker.evaluate(weight_claim, weight.event.run, weight_value))
    assert not _verified(checker.evaluate(replace(weight_claim, layout="transposed"),
                                          weight.event.run, weight_value))


def _verified(result: Evaluated) -> bool:
    assert result.check is not None, result.not_checked
    return result.check.verified


def test_a_check_on_tiny_gradients_is_not_vacuous() -> None:
    """Deep models' early gradients can be 1e-17 throughout: the check is relative to the
    tensor's scale, so another tensor of the same tininess does not pass for it, while the
    same values (and exact zeros) still do."""
    expected = torch.tensor([1e-17, -2e-17, 3e-17])
    same = TensorValue((3,), "float32", expected.tolist())
    other = TensorValue((3,), "float32", [2e-17, -1e-17, 1e-17])
    assert check(same, expected).verified
    assert not check(other, expected).verified
    assert check(TensorValue((2,), "float32", [0.0, 0.0]), torch.zeros(2)).verified
    assert not check(TensorValue((2,), "float32", [0.0, 1e-20]), torch.zeros(2)).verified
