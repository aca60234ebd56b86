"""The checks against the hook-free run (capture/checks.py) can fail: on a wrong value, a wrong
shape, a wrong label, and on tiny gradients of another tensor."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gradexplain.capture.checks import RECOMPUTED, agreement, check
from gradexplain.capture.claims import ClaimChecker, Evaluated
from gradexplain.capture.label import EventLabels, label_pass
from gradexplain.capture.remembered import remembering
from gradexplain.capture.replay import Replay
from gradexplain.capture.values import tensor_value, value_limit
from gradexplain.language import load_spec
from gradexplain.records.names import Naming
from gradexplain.records.trace import Summary, TensorValue
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
    checker, events = _two_modules()
    mul = _module_backward(events)
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


def test_a_wrong_label_fails_its_check_with_the_memo() -> None:
    """Each of two claims checked against both values, in both orders (each by a checker of its
    own, which evaluates a claim about a value once): only the right pairs pass, whatever was
    remembered first."""
    _, events = _two_modules()
    mul = _module_backward(events)
    claims = [label.meaning for label in mul.labels[:2]]
    values = [arg.value for arg in mul.event.args[:2]]
    assert values[0] != values[1]
    for order in ((0, 1), (1, 0)):
        checker, _ = _two_modules()
        with remembering():
            for claim_number in order:
                for value_number in order:
                    claim, value = claims[claim_number], values[value_number]
                    assert claim is not None and value is not None
                    result = checker.evaluate(claim, mul.event.run, value)
                    assert _verified(result) == (claim_number == value_number)


def _two_modules() -> tuple[ClaimChecker, list[EventLabels]]:
    """The legacy pass of two_modules.yaml labelled, and a checker of its claims."""
    spec = load_spec(TWO_MODULES)
    legacy, _ = trace_both(spec)
    view, events = label_pass(legacy, Naming())
    return ClaimChecker(view, Replay(spec, legacy, view.signature())), events


def _module_backward(events: list[EventLabels]) -> EventLabels:
    return next(item for item in events
                if item.event.hook == "backward" and item.event.target == "module")


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


SUMMARY_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-3.0, max_value=3.0),
    st.sampled_from([0.0, -0.0, 1e-17, -1e-30, 1e308]))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(min_value=-1e6, max_value=1e6) | st.sampled_from(
           [0.0, -0.0, math.inf, -math.inf, math.nan]), min_size=5, max_size=5),
       changes=st.lists(st.none() | SUMMARY_NUMBERS, min_size=4, max_size=4),
       relative=st.sampled_from([0.0, 1e-7, 1e-5, 1e-4]))
def test_a_summary_is_checked_as_agreement_checks_its_four_numbers(
        values: list[float], changes: list[float | None], relative: float) -> None:
    """A summarised value's check (on Python floats where they are finite) says what
    `agreement` says of the four numbers as float64 tensors, error included; a recorded number
    changed by more than the tolerance fails."""
    expected = torch.tensor(values, dtype=torch.float64)
    with value_limit(4):
        recorded = tensor_value(expected)
    assert recorded is not None and recorded.summary is not None
    numbers = [recorded.summary.min, recorded.summary.max, recorded.summary.mean,
               recorded.summary.norm]
    got = [number if change is None else number * (1.0 + relative) + change
           for number, change in zip(numbers, changes, strict=True)]
    summary = TensorValue(recorded.shape, recorded.dtype, None, Summary(*got))
    reference = torch.stack([expected.min(), expected.max(), expected.mean(), expected.norm()])
    oracle = agreement(torch.tensor(got, dtype=torch.float64), reference, RECOMPUTED)
    for remember in (False, True):
        with value_limit(4), (remembering() if remember else nullcontext()):
            result = check(summary, expected)
            again = check(summary, expected)
        assert repr(result) == repr(again)  # nan is not equal to itself
        assert result.verified == oracle[0]
        assert (result.max_abs_err == oracle[1]
                or (math.isnan(result.max_abs_err) and math.isnan(oracle[1])))
