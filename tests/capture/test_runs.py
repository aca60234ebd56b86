"""The calls after the forward, in order: `.grad` around each call, and torch's errors caught and
explained (issue 5's error lessons). torch is the oracle: each spec's calls are made again in
plain PyTorch here, and the errors' messages and the `.grad` values must be torch's own."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from gradexplain.capture.build import build
from gradexplain.language import load_spec
from gradexplain.records.walk import RunStep, Walk
from gradexplain.render.console import plain_text
from gradexplain.render.lessons.calls import runs_markdown, runs_text
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS, run_cli
from tests.helpers.mdcheck import assert_markdown_well_formed


def _walk(name: str) -> Walk:
    return captured(str(SPECS / f"{name}.yaml")).walk


def _raised(action: Callable[[], object]) -> str:
    with pytest.raises(RuntimeError) as caught:
        action()
    return str(caught.value)


def _after(step: RunStep, leaf: str) -> torch.Tensor | None:
    value = dict((item.name, item.after) for item in step.leaves)[leaf]
    return None if value is None else torch.tensor(value.value)


def test_backward_of_a_non_scalar_without_gradient_is_torchs_error_explained() -> None:
    inp = torch.tensor([1.0, 2.0])
    w_1 = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    w_2 = torch.tensor([[2.0, 3.0], [4.0, 2.0]], requires_grad=True)
    y_2 = w_2 @ (w_1 @ inp)
    message = _raised(lambda: y_2.backward())
    y_2.sum().backward()

    first, second = _walk("scalar_only").runs
    assert first.error is not None and first.error.expected
    assert first.error.message == message
    assert first.error.shape == (2,)
    assert first.explanation is not None
    assert "y_2.backward(gradient=torch.ones_like(y_2))" in first.explanation.fix
    assert second.error is None
    assert w_1.grad is not None and w_2.grad is not None
    torch.testing.assert_close(_after(second, "w_1"), w_1.grad)
    torch.testing.assert_close(_after(second, "w_2"), w_2.grad)
    assert all(leaf.check is not None and leaf.check.verified for leaf in second.leaves)


def test_second_backward_names_the_freed_node_and_an_add_runs_twice() -> None:
    spec = load_spec(SPECS / "second_backward.yaml")
    x = build(spec).input("x").detach().requires_grad_(True)
    v = torch.tensor([100.0, 0.1])
    y = x * 3
    y.backward(v)
    assert x.grad is not None
    after_first = x.grad.clone()
    message = _raised(lambda: y.backward(v))
    w = x + 3
    w.backward(torch.ones(2))
    after_third = x.grad.clone()
    w.backward(torch.ones(2))  # AddBackward0 saved nothing: no retain_graph needed

    steps = _walk("second_backward").runs
    assert [step.error is not None for step in steps] == [False, True, False, False]
    failed = steps[1]
    assert failed.error is not None and failed.error.message == message
    assert failed.error.expected
    assert any(item.startswith("MulBackward0") for item in failed.error.freed)
    assert failed.explanation is not None and "MulBackward0" in failed.explanation.why
    for step, expected in zip(steps, (after_first, after_first, after_third, x.grad),
                              strict=True):
        torch.testing.assert_close(_after(step, "x"), expected)


def test_backward_of_a_tensor_without_grad_is_explained() -> None:
    x = torch.randn(2)
    message = _raised(lambda: (x * 3).backward(torch.ones(2)))
    first = _walk("no_grad_backward").runs[0]
    assert first.error is not None and first.error.message == message
    assert not first.error.requires_grad
    assert first.explanation is not None and "requires_grad" in first.explanation.fix


def test_column_backward_zeroes_between_columns_and_accumulates_without() -> None:
    spec = load_spec(SPECS / "column_backward.yaml")
    built = build(spec)
    x = built.input("x").detach().requires_grad_(True)
    layers = dict(built.model.named_children())
    net = nn.Sequential(layers["fc1"], layers["act"], layers["fc2"])
    pred = net(x)
    ones = torch.ones(4)
    expected = []
    pred[:, 0].backward(ones, retain_graph=True)
    expected.append(x.grad.clone() if x.grad is not None else None)
    x.grad = None
    net.zero_grad(set_to_none=True)
    pred[:, 1].backward(ones, retain_graph=True)
    expected.append(x.grad.clone() if x.grad is not None else None)
    pred[:, 2].backward(ones, retain_graph=True)  # no zeroing: columns 1 and 2 summed
    expected.append(x.grad.clone() if x.grad is not None else None)

    steps = _walk("column_backward").runs
    assert [step.zeroed for step in steps] == [False, True, False]
    for step, grad in zip(steps, expected, strict=True):
        assert grad is not None
        torch.testing.assert_close(_after(step, "x"), grad)
        assert all(leaf.check is not None and leaf.check.verified for leaf in step.leaves)
        assert step.post_accumulate == 5  # x and the four parameters


def test_autograd_grad_leaves_grad_alone_and_fires_no_post_accumulate_hook() -> None:
    for step in _walk("multi_output").runs:
        assert step.kind == "grad"
        assert step.post_accumulate == 0
        assert all(leaf.before is None and leaf.after is None for leaf in step.leaves)


def test_seeded_calls_are_labelled_as_vector_jacobian_products() -> None:
    walk = _walk("vector_backward")
    texts = {arg.meaning.text for walk_pass in walk.passes for event in walk_pass.events
             for arg in event.args if arg.meaning is not None}
    assert "vᵀ·∂y/∂x" in texts
    assert not any(text.startswith("∂y/") for text in texts)
    plain = _walk("two_modules")
    assert not any(arg.meaning.text.startswith("vᵀ") for walk_pass in plain.passes
                   for event in walk_pass.events for arg in event.args
                   if arg.meaning is not None)


def test_the_chain_rule_names_a_number_operand() -> None:
    (derivation, *_) = _walk("vector_backward").derivations
    assert any(term.local == "g ⊙ 3" for line in derivation.lines for term in line.terms)


def test_runs_render_as_text_and_markdown() -> None:
    walk = _walk("second_backward")
    text = plain_text(runs_text(walk))
    assert "torch raised RuntimeError, as the spec expected ✓" in text
    assert "retain_graph=True" in text and "MulBackward0" in text
    assert "[300, 0.3] + [1, 1] = [301, 1.3]" in text
    markdown = runs_markdown(walk, 2)
    assert_markdown_well_formed(markdown)
    assert "**Fix**" in markdown


UNEXPECTED = """\
inputs:
  x: {value: [1.0, 2.0], requires_grad: true}
forward: ["y = x * 3"]
backward:
  - {of: y, gradient: [1.0, 1.0]}
  - {of: y, gradient: [1.0, 1.0]}
"""


def test_an_unexpected_error_is_explained_and_exits_1(
        write_spec: Callable[[str, str], Path]) -> None:
    result = run_cli("walk", str(write_spec(UNEXPECTED, "spec.yaml")), "--pass", "legacy")
    assert result.code == 1, result.stderr
    assert "which the spec did not expect" in result.stdout
    assert "fix:" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


OTHER_ERROR = UNEXPECTED.replace("  - {of: y, gradient: [1.0, 1.0]}\n  - {of: y, gradient",
                                  "  - {of: y, gradient: [1.0, 1.0]}\n  - {of: y, expect_error: "
                                  "'some other message', gradient")


def test_an_error_other_than_the_one_expected_says_what_was_expected(
        write_spec: Callable[[str, str], Path]) -> None:
    """The second backward through a freed graph raises, but not the error the spec expects:
    that said "which the spec did not expect", and never showed what the spec expected."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.backward(torch.ones(2))
    with pytest.raises(RuntimeError) as raised:
        y.backward(torch.ones(2))
    assert "some other message" not in str(raised.value)
    assert "expect_error: 'some other message'" in OTHER_ERROR
    result = run_cli("walk", str(write_spec(OTHER_ERROR, "spec.yaml")), "--pass", "legacy")
    assert result.code == 1, result.stderr
    assert ("✗ torch raised RuntimeError, but its message does not contain 'some other "
            "message', which the spec expects") in " ".join(result.stdout.split())
    assert "which the spec did not expect" not in result.stdout


MISSING = """\
inputs:
  x: {value: [1.0, 2.0], requires_grad: true}
forward: ["y = x * 3"]
backward:
  - {of: y, gradient: [1.0, 1.0], expect_error: scalar outputs}
"""


def test_an_expected_error_that_does_not_come_is_one_line_and_exit_1(
        write_spec: Callable[[str, str], Path]) -> None:
    result = run_cli("walk", str(write_spec(MISSING, "spec.yaml")))
    assert result.code == 1
    assert "expected torch to raise an error containing 'scalar outputs'" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_first_calls_grad_check_is_against_what_it_added_in_float64() -> None:
    """A call with no `.grad` before it: each leaf's `.grad` after is checked against what the
    call added, the expected record in float64 (a summary above the value limit), the same
    numbers plain torch's gradient has; a `.grad` other than that fails."""
    from gradexplain import explain
    from gradexplain.capture.passes import _accumulated
    from gradexplain.capture.values import tensor_value

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(40, 30), nn.Tanh(), nn.Linear(30, 2))  # 1,200 weights
    x = torch.randn(5, 40)
    plain = copy.deepcopy(model)
    plain(x).sum().backward()
    (step,) = explain(model, x).walk.runs
    kinds = set()
    for leaf in step.leaves:
        name = leaf.name
        want = (dict(plain.named_parameters())[name].grad if name != "input" else None)
        assert leaf.check is not None and leaf.check.verified, name
        expected = leaf.check.expected
        assert expected is not None and expected.dtype == "float64"
        if want is None:
            continue
        kinds.add("summary" if expected.summary is not None else "values")
        want64 = want.double()
        if expected.summary is not None:
            numbers = (expected.summary.min, expected.summary.max, expected.summary.mean,
                       expected.summary.norm)
            assert numbers == pytest.approx((float(want64.min()), float(want64.max()),
                                             float(want64.mean()), float(want64.norm())),
                                            rel=1e-5, abs=1e-7), name
        else:
            torch.testing.assert_close(torch.tensor(expected.value, dtype=torch.float64),
                                       want64, rtol=1e-5, atol=1e-7)
    assert kinds == {"summary", "values"}
    added = torch.full((3, 4), 0.5)
    wrong = tensor_value(torch.full((3, 4), 0.75))
    right = tensor_value(added.clone())
    right_check, wrong_check = _accumulated(None, added, right), _accumulated(None, added, wrong)
    assert right_check is not None and right_check.verified
    assert wrong_check is not None and not wrong_check.verified
    assert wrong_check.expected == tensor_value(added.double())


@pytest.mark.parametrize("kind", ["backward", "grad"])
def test_a_seed_of_the_wrong_shape_expected_to_fail_is_torchs_error_explained(
        kind: str, tmp_path: Path) -> None:
    # A spec that means to show the error: its expect_error lets the wrong shape through to
    # torch, whose message (and refusal) the walk must then show as it is.
    x = torch.tensor([1.0, -2.0], requires_grad=True)
    y = x * 3
    if kind == "backward":
        message = _raised(lambda: y.backward(torch.tensor([1.0, 2.0, 3.0])))
        call = '{of: y, gradient: [1.0, 2.0, 3.0], expect_error: "shape"}'
    else:
        message = _raised(lambda: torch.autograd.grad(y, x, torch.tensor([1.0, 2.0, 3.0])))
        call = '{of: y, wrt: x, grad_outputs: [1.0, 2.0, 3.0], expect_error: "shape"}'
    spec = tmp_path / "seed.yaml"
    spec.write_text("name: seed\ninputs:\n  x: {value: [1.0, -2.0], requires_grad: true}\n"
                    f"forward: ['y = x * 3']\n{kind}:\n  - {call}\n", encoding="utf-8")
    walk = captured(str(spec)).walk
    (step,) = walk.runs
    assert step.error is not None and step.error.expected
    assert step.error.message == message
    assert step.explanation is not None and "(2,)" in step.explanation.fix
