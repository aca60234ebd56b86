"""The vector-Jacobian-product lesson against plain PyTorch: the articles' computations written out
here (y = x * 3 seeded with [100, 0.1]; the 2 -> 10 -> 3 MLP seeded with ones and one-hot columns)
are the oracle for every number a lesson holds, every identity it claims is verified, a wrong value
is not, and both renderers show the key numbers and sentences."""

from __future__ import annotations

import dataclasses
import functools
import json
import re

import torch
from torch import nn

from gradexplain.capture.build import build
from gradexplain.capture.lessons.vjp import check_identity, combine_rows, vjp_lessons
from gradexplain.language import load_spec, load_spec_text
from gradexplain.records.codec import from_data, to_data
from gradexplain.records.lessons.vjp import Identity, VjpLesson
from gradexplain.records.names import Naming
from gradexplain.records.trace import TensorValue
from gradexplain.render.console import plain_text
from gradexplain.render.lessons.vjp import vjp_markdown, vjp_text
from tests.helpers.cli import SPECS
from tests.helpers.mdcheck import assert_markdown_well_formed, tables
from tests.helpers.printed import NUMBER, close_enough

# p * x then a square: a parameter, an intermediate and an input to differentiate with respect
# to, a backward with a gradient, a grad call with a literal seed and one with ones; the calls
# without a seed or expected to fail have no lesson.
SQUARE_SPEC = """
name: square
seed: 0
inputs:
  x: {value: [1.0, 2.0], requires_grad: true}
modules:
  module:
    params: {p: [3.0, 4.0]}
    forward: {args: [x], steps: ["y = p * x"]}
forward: ["y = module(x)", "z = y * y", "s = sum(z)"]
backward:
  - {of: z, gradient: [1.0, 2.0], retain_graph: true}
  - {of: s, retain_graph: true}
grad:
  - {of: z, wrt: [y, module.p], grad_outputs: [1.0, 0.5], retain_graph: true}
  - {of: z, wrt: x, grad_outputs: ones, retain_graph: true}
  - {of: s, wrt: x}
"""


@functools.cache
def lessons_of(spec_file: str) -> tuple[VjpLesson, ...]:
    return vjp_lessons(load_spec(SPECS / spec_file))


@functools.cache
def square_lessons() -> tuple[VjpLesson, ...]:
    return vjp_lessons(load_spec_text(SQUARE_SPEC))


def tensor(value: TensorValue | None) -> torch.Tensor:
    assert value is not None and value.value is not None
    return torch.tensor(value.value, dtype=torch.float64)


def close(value: TensorValue | None, expected: torch.Tensor) -> bool:
    return torch.allclose(tensor(value), expected.detach().double(), rtol=1e-5, atol=1e-6)


def flat(text: str) -> str:
    """Text with every run of whitespace made one space: rich wraps long lines at 100 columns."""
    return " ".join(text.split())


# --- y = x * 3, backward with gradient [100, 0.1] (the autograd tutorial) ------------------------


def test_vector_backward_is_v_transpose_j() -> None:
    spec = load_spec(SPECS / "vector_backward.yaml")
    x = build(spec).input("x").detach().clone().requires_grad_(True)
    y = x * 3
    v = torch.tensor([100.0, 0.1])
    y.backward(v)
    jacobian = torch.autograd.functional.jacobian(lambda t: t * 3, x.detach())

    (lesson,) = lessons_of("vector_backward.yaml")
    assert (lesson.kind, lesson.call, lesson.of, lesson.wrt) == ("backward", 0, "y", "x")
    assert (lesson.seed_kind, lesson.column) == ("gradient", None)
    assert lesson.of_shape == lesson.wrt_shape == (2,)
    assert close(lesson.seed, v)
    assert x.grad is not None
    assert close(lesson.result, x.grad)
    assert close(lesson.result, torch.tensor([300.0, 0.3]))
    assert close(lesson.jacobian, jacobian)
    assert close(lesson.jacobian, torch.diag(torch.tensor([3.0, 3.0])))
    assert lesson.jacobian_method == "jacrev"
    assert [term.output_index for term in lesson.rows] == [(0,), (1,)]
    assert [round(term.weight, 6) for term in lesson.rows] == [100.0, 0.1]
    for term, row in zip(lesson.rows, jacobian, strict=True):
        assert close(term.row, row)
    assert [identity.text for identity in lesson.identities] == ["vᵀJ = Σᵢ vᵢ·J[i]"]
    assert lesson.verified
    assert lesson.per_sample is None


# --- the MLP 2 -> 10 -> 3 on a batch of 10 (the multi-output article) -----------------------------


def article_mlp() -> tuple[nn.Module, torch.Tensor]:
    """The article's network in plain torch, with the weights and input of the spec's build."""
    built = build(load_spec(SPECS / "multi_output.yaml"))
    weights = dict(built.model.named_parameters())
    mlp = nn.Sequential(nn.Linear(2, 10), nn.Tanh(), nn.Linear(10, 3))
    with torch.no_grad():
        for index, layer in (("0", "fc1"), ("2", "fc2")):
            for kind in ("weight", "bias"):
                getattr(mlp.get_submodule(index), kind).copy_(weights[f"model.{layer}.{kind}"])
    return mlp, built.input("x_temp").detach().clone().requires_grad_(True)


def test_multi_output_lessons_match_torch() -> None:
    mlp, x = article_mlp()
    pred = mlp(x)
    ones = torch.autograd.grad(pred, x, torch.ones(10, 3), retain_graph=True)[0]
    columns = []
    for j in range(3):
        seed = torch.zeros(10, 3)
        seed[:, j] = 1.0
        columns.append(torch.autograd.grad(pred, x, seed, retain_graph=True)[0])
    jacobian = torch.autograd.functional.jacobian(mlp, x.detach())
    per_sample = torch.stack([jacobian[b, :, b, :] for b in range(10)])
    # The oracle's own facts first: the article's sum, and samples that do not interact.
    assert torch.allclose(ones, torch.stack(columns).sum(0), atol=1e-6)
    assert torch.allclose(ones[0, 0], columns[0][0, 0] + columns[1][0, 0] + columns[2][0, 0])
    off_diagonal = jacobian.permute(0, 2, 1, 3)[~torch.eye(10, dtype=torch.bool)]
    assert torch.count_nonzero(off_diagonal) == 0

    lessons = lessons_of("multi_output.yaml")
    assert [(lesson.seed_kind, lesson.column) for lesson in lessons] == [
        ("ones", None), ("one_hot", 0), ("one_hot", 1), ("one_hot", 2)]
    for lesson, expected in zip(lessons, [ones, *columns], strict=True):
        assert (lesson.kind, lesson.of, lesson.wrt) == ("grad", "pred", "x_temp")
        assert lesson.of_shape == (10, 3) and lesson.wrt_shape == (10, 2)
        assert close(lesson.result, expected)
        assert close(lesson.jacobian, jacobian)
        assert lesson.rows == ()  # 600 Jacobian elements: too many terms to list
        assert lesson.per_sample is not None
        assert lesson.per_sample.jacobian.shape == (10, 3, 2)
        assert close(lesson.per_sample.jacobian, per_sample)
        for column, oracle in zip(lesson.per_sample.columns, columns, strict=True):
            assert close(column, oracle)
        assert lesson.verified, lesson.identities
    assert close(lessons[0].seed, torch.ones(10, 3))
    for j, lesson in enumerate(lessons[1:]):
        assert close(lesson.result, per_sample[:, j, :])


def test_multi_output_identities_are_the_articles_claims() -> None:
    ones_lesson, one_hot_lesson = lessons_of("multi_output.yaml")[:2]
    texts = {identity.text for identity in ones_lesson.identities}
    assert "v = ones: vᵀJ = Σ of the 3 one-hot columns' VJPs" in texts
    assert "v = ones: vᵀJ = the gradient of pred.sum()" in texts
    assert "cross-sample blocks of J are zero: ∂pred[b]/∂x_temp[c] = 0 for b ≠ c" in texts
    assert "vᵀJ = Σᵢ vᵢ·J[i]" in texts
    assert "v = one-hot column 0: vᵀJ = per-sample J[:, 0, :]" in {
        identity.text for identity in one_hot_lesson.identities}


# --- parameters, intermediates, literal and ones seeds; what gets no lesson --------------------


def test_parameter_intermediate_and_input_jacobians() -> None:
    x = torch.tensor([1.0, 2.0])
    p = torch.tensor([3.0, 4.0])
    lessons = square_lessons()
    # backward 0 (z, gradient [1, 2]) on x and module.p; grad 0 on y and module.p; grad 1 on x.
    # backward 1 has no gradient and grad 2 no grad_outputs: no lesson.
    assert [(lesson.kind, lesson.call, lesson.wrt, lesson.jacobian_method)
            for lesson in lessons] == [
        ("backward", 0, "x", "jacrev"), ("backward", 0, "module.p", "functional_call"),
        ("grad", 0, "y", "autograd"), ("grad", 0, "module.p", "functional_call"),
        ("grad", 1, "x", "jacrev")]
    on_x = torch.autograd.functional.jacobian(lambda t: (p * t) * (p * t), x)
    on_p = torch.autograd.functional.jacobian(lambda t: (t * x) * (t * x), p)
    on_y = torch.autograd.functional.jacobian(lambda t: t * t, p * x)
    backward_v, grad_v = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.5])
    expected = [(on_x, backward_v), (on_p, backward_v), (on_y, grad_v), (on_p, grad_v),
                (on_x, torch.ones(2))]
    for lesson, (jacobian, seed) in zip(lessons, expected, strict=True):
        assert close(lesson.jacobian, jacobian)
        assert close(lesson.seed, seed)
        assert close(lesson.result, seed @ jacobian)
        assert lesson.verified, lesson.identities
    assert "v = ones: vᵀJ = the gradient of z.sum()" in {
        identity.text for identity in lessons[-1].identities}


def test_expected_errors_and_unseeded_calls_have_no_lesson() -> None:
    spec = load_spec_text("""
name: errors
seed: 0
inputs:
  x: {randn: [2], requires_grad: true}
forward: ["y = x * 3"]
backward:
  - {of: y, gradient: [1.0, 1.0]}
  - {of: y, gradient: [1.0, 1.0], expect_error: "backward through the graph a second time"}
""")
    assert [lesson.call for lesson in vjp_lessons(spec)] == [0]
    assert vjp_lessons(load_spec(SPECS / "two_modules.yaml")) == ()


# --- the checking helper -----------------------------------------------------------------------


def test_check_identity_rejects_a_wrong_value() -> None:
    (lesson,) = lessons_of("vector_backward.yaml")
    result, seed, jacobian = tensor(lesson.result), tensor(lesson.seed), tensor(lesson.jacobian)
    assert check_identity("right", result, combine_rows(seed, jacobian)).verified
    wrong = jacobian.clone()
    wrong[1, 1] += 0.01  # J[1] scaled by v₁ = 0.1: the sum is off by 0.001
    failed = check_identity("wrong", result, combine_rows(seed, wrong))
    assert not failed.verified
    assert abs(failed.max_abs_err - 0.001) < 1e-6
    # The Jacobian itself is not what backward returned: a different shape never verifies.
    mismatch = check_identity("J is not vᵀJ", result, jacobian)
    assert not mismatch.verified and mismatch.max_abs_err == float("inf")
    # float32 rounding passes, a float32-sized error on top of it does not.
    as_float = torch.tensor([300.0, 0.3])
    assert check_identity("rounding", as_float, as_float.double() + 1e-6).verified
    assert not check_identity("error", as_float, as_float + 0.01).verified


def test_check_identity_treats_inf_and_nan_as_values() -> None:
    # d/dx √x at 0 is inf and 0 * inf is nan: sides of an identity may hold both, computed
    # alike; torch calls such tensors equal (allclose with equal_nan), and so must the identity.
    x = torch.tensor([0.0, 4.0], requires_grad=True)
    (slope,) = torch.autograd.grad(torch.sqrt(x).sum(), x)
    sides = torch.stack([slope, slope * torch.tensor([0.0, 1.0])])
    assert torch.allclose(sides.clone(), sides, equal_nan=True)
    same = check_identity("alike", sides.clone(), sides)
    assert same.verified and same.max_abs_err == 0.0
    finite = sides.nan_to_num()
    assert not torch.allclose(finite, sides, equal_nan=True)
    differs = check_identity("one side finite", finite, sides)
    assert not differs.verified and differs.max_abs_err == float("inf")


def test_lessons_survive_the_json_codec() -> None:
    lessons = lessons_of("vector_backward.yaml") + lessons_of("multi_output.yaml")
    data = json.loads(json.dumps(to_data(lessons)))
    assert from_data(tuple[VjpLesson, ...], data) == lessons


# --- renderers ---------------------------------------------------------------------------------


def test_text_shows_v_transpose_j_not_j() -> None:
    text = plain_text(vjp_text(lessons_of("vector_backward.yaml")), width=100)
    assert max(len(line) for line in text.splitlines()) <= 100
    words = flat(text)
    assert ("backward(gradient=v) computes vᵀJ, one number per element of x, not the Jacobian J "
            "(2×2 here)") in words
    assert "v = [100, 0.1], the gradient argument" in words
    assert "J = ∂y/∂x: shape [2, 2], [[3, 0], [0, 3]]" in words
    assert "100 · [3, 0] (y[0])" in words
    assert "+ 0.1 · [0, 3] (y[1])" in words
    assert "vᵀJ = [300, 0.3], shape [2] (what backward adds to x.grad)" in words
    assert "✓ vᵀJ = Σᵢ vᵢ·J[i]" in words


def test_text_explains_ones_and_one_hot_seeds() -> None:
    lessons = lessons_of("multi_output.yaml")
    words = flat(plain_text(vjp_text(lessons), width=100))
    assert ("with v = ones it is the sum over the 3 outputs of each output's gradient, not a "
            "(10, 3, 2) tensor of per-output gradients") in words
    assert "with v = one-hot column 1 it is output 1's gradient for every sample" in words
    assert "per-sample Jacobians J_b = ∂pred[b]/∂x_temp[b], shape [10, 3, 2]" in words
    assert "sample 2:" in words and "sample 3:" not in words
    # The article's 0.1839 − 0.1607 + 0.1362 = 0.1594, with this build's numbers.
    columns = lessons[0].per_sample.columns if lessons[0].per_sample else ()
    firsts = [tensor(column)[0, 0].item() for column in columns]
    assert len(firsts) == 3
    total = tensor(lessons[0].result)[0, 0].item()
    assert abs(sum(firsts) - total) < 1e-6
    # The sum as the text writes it out (vᵀJ[0, 0] = 0.12129 − 0.0042312 − 0.065039 = 0.052022
    # here), read back as numbers: the build's random weights may round differently elsewhere.
    number = f"({NUMBER.pattern})"
    said = re.search(rf"vᵀJ\[0, 0\] = {number} ([+−]) {number} ([+−]) {number} = {number}",
                     words)
    assert said is not None, words
    first, sign_1, second, sign_2, third, shown_total = said.groups()
    terms = [float(first), float(second) * (-1 if sign_1 == "−" else 1),
             float(third) * (-1 if sign_2 == "−" else 1)]
    assert all(close_enough(term, want) for term, want in zip(terms, firsts, strict=True)), (
        said.group(0), firsts)
    assert close_enough(float(shown_total), total), (said.group(0), total)
    assert "✗" not in words


def test_renderers_show_a_failed_identity() -> None:
    (lesson,) = lessons_of("vector_backward.yaml")
    broken = dataclasses.replace(lesson, identities=(Identity("vᵀJ = Σᵢ vᵢ·J[i]", False, 0.5),))
    assert "✗ FAILED vᵀJ = Σᵢ vᵢ·J[i] (max abs error 0.5)" in flat(plain_text(vjp_text((broken,))))
    markdown = vjp_markdown((broken,), 2, Naming())
    assert_markdown_well_formed(markdown)
    assert "✗ **FAILED**" in markdown


def test_markdown_is_well_formed() -> None:
    every = (lessons_of("vector_backward.yaml") + lessons_of("multi_output.yaml")
             + square_lessons())
    for level in (1, 2, 6):
        assert_markdown_well_formed(vjp_markdown(every, level, Naming()))
    empty = vjp_markdown((), 2, Naming())
    assert_markdown_well_formed(empty)
    assert "no vector-Jacobian product to explain" in empty

    markdown = vjp_markdown(lessons_of("vector_backward.yaml"), 2, Naming())
    assert markdown.startswith("## Vector-Jacobian products\n")
    assert "not the Jacobian J (2×2 here)" in markdown
    terms, identities = tables(markdown)
    assert [row[:2] for row in terms[1]] == [["`y[0]`", "`100`"], ["`y[1]`", "`0.1`"],
                                            ["**sum**", ""]]
    assert terms[1][-1][2] == "`[300, 0.3]`"
    assert identities[1][0][0] == "✓"
    assert r"$J = \frac{\partial y}{\partial x}$" in markdown
