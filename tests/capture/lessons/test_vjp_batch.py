"""Edge cases of the vector-Jacobian-product lesson (gradexplain/vjp.py) around the batch: squeeze,
unsqueeze and reshape steps that treat a batch of one differently from the real batch, steps that
mix the samples, two inputs sharing a batch, and the size limits of the per-sample part.

Every lesson here must either verify every identity it claims or say why it has no per-sample
blocks; never crash, never fail a check when the math is right. Plain PyTorch written in these
tests is the oracle (torch.autograd.functional.jacobian, torch.func.vmap/jacrev,
torch.autograd.grad); the lesson's own numbers are never compared with themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

import gradexplain.capture.lessons.vjp as vjp
from gradexplain.capture.build import build
from gradexplain.capture.lessons.vjp import vjp_lessons
from gradexplain.language import load_spec_text
from gradexplain.records.codec import from_data, to_data
from gradexplain.records.lessons.vjp import VjpLesson
from gradexplain.records.names import Naming
from gradexplain.records.trace import TensorValue
from gradexplain.render.console import plain_text
from gradexplain.render.lessons.vjp import vjp_markdown, vjp_text
from tests.helpers.capture import capture_text
from tests.helpers.cli import SPECS, run_cli
from tests.helpers.mdcheck import assert_markdown_well_formed

Function = Callable[[torch.Tensor], torch.Tensor]


def as_tensor(value: TensorValue | None) -> torch.Tensor:
    assert value is not None and value.value is not None
    return torch.tensor(value.value, dtype=torch.float64)


def close(value: TensorValue | None, expected: torch.Tensor) -> bool:
    got = as_tensor(value)
    want = expected.detach().double()
    return got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-6)


def flat(text: str) -> str:
    """Text with every run of whitespace made one space: rich wraps long lines at 100 columns."""
    return " ".join(text.split())


def diagonal_blocks(jacobian: torch.Tensor) -> torch.Tensor:
    """(batch, m, n) from a Jacobian (batch, m, batch, n): block b is ∂out[b]/∂in[b]."""
    return torch.stack([jacobian[b, :, b, :] for b in range(jacobian.shape[0])])


def cross_blocks(jacobian: torch.Tensor) -> torch.Tensor:
    """Every block ∂out[b]/∂in[c] with b ≠ c, flattened into one tensor."""
    batch = jacobian.shape[0]
    return jacobian.permute(0, 2, 1, 3)[~torch.eye(batch, dtype=torch.bool)]


def texts(lesson: VjpLesson) -> list[str]:
    return [identity.text for identity in lesson.identities]


# --- one input, one step list, every kind of seed ------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A forward over one input x, the same forward in plain torch, and what the lesson should
    say about per-sample blocks: shown, absent without a word (the shapes are no batch), or
    absent with a reason containing `skipped`."""

    name: str
    shape: tuple[int, ...]
    steps: tuple[str, ...]
    torch_forward: Function
    per_sample: bool
    skipped: str | None = None


CASES = [
    # squeeze on a (3, 2) changes nothing, but on a batch of one it drops the batch dimension.
    Case("squeeze_changes_nothing", (3, 2), ("a = squeeze(x)", "pred = a * 2"),
         lambda x: x.squeeze() * 2, per_sample=True),
    Case("squeeze_dim_0", (3, 2), ("pred = squeeze(x * 2, 0)",),
         lambda x: (x * 2).squeeze(0), per_sample=True),
    Case("squeeze_then_softmax_rows", (3, 2), ("a = squeeze(x)", "pred = softmax(a, 1)"),
         lambda x: torch.softmax(x.squeeze(), 1), per_sample=True),
    # squeeze that does drop a dimension: the output is no batch any more.
    Case("squeeze_drops_column", (3, 1), ("a = squeeze(x)", "pred = a * 2"),
         lambda x: x.squeeze() * 2, per_sample=False),
    Case("squeeze_drops_batch", (1, 3), ("a = squeeze(x)", "pred = a * 2"),
         lambda x: x.squeeze() * 2, per_sample=False),
    Case("unsqueeze_then_squeeze", (3, 2), ("a = unsqueeze(x, 1)", "pred = squeeze(a) * 2"),
         lambda x: x.unsqueeze(1).squeeze() * 2, per_sample=True),
    Case("unsqueeze_three_dims", (3, 2), ("pred = unsqueeze(x, 0) * 2",),
         lambda x: x.unsqueeze(0) * 2, per_sample=False),
    Case("batch_of_one", (1, 2), ("a = squeeze(x)", "pred = unsqueeze(a, 0) * 2"),
         lambda x: x.squeeze().unsqueeze(0) * 2, per_sample=True),
    # A reshape to a fixed shape refuses a batch of one; -1 follows the batch.
    Case("reshape_fixed_shape", (3, 2), ("a = reshape(x, 3, 2)", "pred = tanh(a)"),
         lambda x: torch.tanh(x.reshape(3, 2)), per_sample=True),
    Case("reshape_minus_one", (3, 2), ("a = reshape(x, -1, 2)", "pred = sin(a)"),
         lambda x: torch.sin(x.reshape(-1, 2)), per_sample=True),
    Case("flatten", (3, 2), ("pred = flatten(x) * 2",),
         lambda x: x.flatten() * 2, per_sample=False),
    # Steps that mix the samples: there is no per-sample Jacobian, and the lesson says why.
    Case("mean_over_batch", (3, 2), ("pred = x - mean(x, 0, keepdim=True)",),
         lambda x: x - x.mean(0, keepdim=True), per_sample=False, skipped="samples interact"),
    Case("softmax_over_batch", (3, 2), ("pred = softmax(x, 0)",),
         lambda x: torch.softmax(x, 0), per_sample=False, skipped="samples interact"),
    Case("transpose", (3, 3), ("a = transpose(x, 0, 1)", "pred = a * 2"),
         lambda x: x.transpose(0, 1) * 2, per_sample=False, skipped="samples interact"),
]


def seed_for(shape: torch.Size) -> torch.Tensor:
    """A literal seed with distinct weights, so that no identity holds by a coincidence."""
    count = 1
    for size in shape:
        count *= size
    return ((torch.arange(count, dtype=torch.float32) % 5 + 1) / 4).reshape(shape)


def case_spec(case: Case, seed: torch.Tensor) -> str:
    literal = json.dumps(seed.tolist())
    return f"""
name: {case.name}
seed: 0
inputs:
  x: {{rand: {json.dumps(list(case.shape))}, requires_grad: true}}
forward: {json.dumps(list(case.steps))}
backward:
  - {{of: pred, gradient: {literal}, retain_graph: true}}
grad:
  - {{of: pred, wrt: x, grad_outputs: ones, retain_graph: true}}
  - {{of: pred, wrt: x, grad_outputs: {{one_hot: 0}}, retain_graph: true}}
  - {{of: pred, wrt: x, grad_outputs: {literal}, retain_graph: true}}
"""


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_batch_shaped_steps_match_torch(case: Case) -> None:
    x0 = torch.rand(case.shape)  # only for the output's shape; the spec's own x comes next
    out_shape = case.torch_forward(x0).shape
    seed = seed_for(out_shape)
    text = case_spec(case, seed)
    x = build(load_spec_text(text)).input("x").detach().clone().requires_grad_(True)
    pred = case.torch_forward(x)
    one_hot = torch.zeros_like(pred)
    one_hot[..., 0] = 1.0
    jacobian = torch.autograd.functional.jacobian(case.torch_forward, x.detach())

    lessons = vjp_lessons(load_spec_text(text))
    assert [(lesson.kind, lesson.seed_kind) for lesson in lessons] == [
        ("backward", "gradient"), ("grad", "ones"), ("grad", "one_hot"), ("grad", "value")]
    for lesson, v in zip(lessons, [seed, torch.ones_like(pred), one_hot, seed], strict=True):
        expected = torch.autograd.grad(pred, x, v, retain_graph=True)[0]
        assert lesson.of_shape == tuple(pred.shape) and lesson.wrt_shape == case.shape
        assert close(lesson.result, expected)
        assert close(lesson.jacobian, jacobian)
        assert lesson.verified, [i for i in lesson.identities if not i.verified]
        if case.per_sample:
            assert lesson.per_sample is not None and lesson.per_sample_skipped is None
            assert close(lesson.per_sample.jacobian, diagonal_blocks(jacobian))
            # The per-sample identities were made, not left out: they are what failed before.
            assert any(text.startswith("row j of each sample's") for text in texts(lesson))
            assert "the diagonal blocks of J are the per-sample Jacobians" in texts(lesson)
        else:
            assert lesson.per_sample is None
            assert not any("sample" in text for text in texts(lesson))
            if case.skipped is None:
                assert lesson.per_sample_skipped is None
            else:
                assert lesson.per_sample_skipped is not None
                assert case.skipped in lesson.per_sample_skipped
    if case.skipped == "samples interact":
        # The oracle agrees that the samples interact: the lesson's reason is a fact of the model.
        assert cross_blocks(jacobian).abs().max() > 1e-3
    elif case.per_sample:
        assert torch.count_nonzero(cross_blocks(jacobian)) == 0


def test_squeeze_on_a_batch_of_one_is_the_pitfall() -> None:
    """Why the lesson never runs one sample as a batch of one: the classic per-sample recipe,
    vmap(jacrev(f)) with f(s) = model(s.unsqueeze(0))[0], computes something else once the model
    squeezes. The lesson's blocks are the true ∂pred[b]/∂x[b] instead."""
    text = case_spec(CASES[0], seed_for(torch.Size([3, 2])))
    x = build(load_spec_text(text)).input("x").detach()

    def model(t: torch.Tensor) -> torch.Tensor:
        return t.squeeze() * 2

    def one_sample(sample: torch.Tensor) -> torch.Tensor:
        return model(sample.unsqueeze(0))[0]

    recipe = torch.func.vmap(torch.func.jacrev(one_sample))(x)
    true_blocks = diagonal_blocks(torch.autograd.functional.jacobian(model, x))
    assert recipe.shape == (3, 2) and true_blocks.shape == (3, 2, 2)
    assert torch.equal(true_blocks, 2 * torch.eye(2).expand(3, 2, 2))

    lesson = vjp_lessons(load_spec_text(text))[1]
    assert lesson.per_sample is not None
    assert close(lesson.per_sample.jacobian, true_blocks)


# --- bug 1: the multi-output MLP with a squeeze between its layers ------------------------------


def squeezed_multi_output() -> str:
    text = (SPECS / "multi_output.yaml").read_text(encoding="utf-8")
    assert '"a = act(h)"' in text
    return text.replace('"a = act(h)"', '"a = squeeze(act(h))"')


def squeezed_mlp(text: str) -> tuple[Function, Function, torch.Tensor]:
    """The spec's MLP in plain torch, with and without the squeeze, with the build's weights."""
    built = build(load_spec_text(text))
    weights = dict(built.model.named_parameters())
    fc1, fc2 = nn.Linear(2, 10), nn.Linear(10, 3)
    with torch.no_grad():
        for layer, name in ((fc1, "fc1"), (fc2, "fc2")):
            layer.weight.copy_(weights[f"model.{name}.weight"])
            layer.bias.copy_(weights[f"model.{name}.bias"])

    def squeezed(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = fc2(torch.tanh(fc1(x)).squeeze())
        return out

    def plain(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = fc2(torch.tanh(fc1(x)))
        return out

    return squeezed, plain, built.input("x_temp").detach().clone().requires_grad_(True)


def test_squeezed_multi_output_matches_torch() -> None:
    text = squeezed_multi_output()
    squeezed, plain, x = squeezed_mlp(text)
    pred = squeezed(x)
    assert pred.shape == (10, 3)
    assert squeezed(x[:1]).shape == (3,)  # a batch of one loses its batch dimension
    columns = []
    for j in range(3):
        seed = torch.zeros(10, 3)
        seed[:, j] = 1.0
        columns.append(torch.autograd.grad(pred, x, seed, retain_graph=True)[0])
    ones = torch.autograd.grad(pred, x, torch.ones(10, 3), retain_graph=True)[0]
    jacobian = torch.autograd.functional.jacobian(squeezed, x.detach())
    # The torch.func recipe on the squeeze-free MLP (the same function on this batch).
    per_sample = torch.func.vmap(torch.func.jacrev(lambda s: plain(s.unsqueeze(0))[0]))(
        x.detach())
    assert torch.allclose(per_sample, diagonal_blocks(jacobian), atol=1e-6)

    lessons = vjp_lessons(load_spec_text(text))
    assert [(lesson.seed_kind, lesson.column) for lesson in lessons] == [
        ("ones", None), ("one_hot", 0), ("one_hot", 1), ("one_hot", 2)]
    for lesson, expected in zip(lessons, [ones, *columns], strict=True):
        assert close(lesson.result, expected)
        assert close(lesson.jacobian, jacobian)
        assert lesson.per_sample is not None
        assert close(lesson.per_sample.jacobian, per_sample)
        for column, oracle in zip(lesson.per_sample.columns, columns, strict=True):
            assert close(column, oracle)
        assert lesson.verified, lesson.identities
    for j, lesson in enumerate(lessons[1:]):
        assert close(lesson.result, per_sample[:, j, :])


def test_squeezed_multi_output_walk_checks_every_label() -> None:
    text = squeezed_multi_output()
    name = "specs/multi_output_squeezed.yaml"
    walk = capture_text(text, name).walk
    assert len(walk.lessons.vjp) == 4
    assert all(lesson.per_sample is not None for lesson in walk.lessons.vjp)
    assert walk.failures() == []
    assert len(walk.checks()) > 0


# --- the command line: the two fuzzer findings --------------------------------------------------


BUG_SPEC = """
inputs:
  x: {rand: [3, 2], requires_grad: true}
forward: ["a = squeeze(x)", "pred = a * 2"]
grad:
  - {of: pred, wrt: x, grad_outputs: ones}
"""


def test_cli_walks_the_fuzzer_findings(write_spec: Callable[[str, str], Path]) -> None:
    for text, file in ((squeezed_multi_output(), "multi.yaml"), (BUG_SPEC, "bug.yaml")):
        result = run_cli("walk", str(write_spec(text, file)))
        assert "internal error" not in result.stderr, result.stderr
        assert result.code == 0, (result.stdout, result.stderr)
        assert "✗" not in result.stdout
        assert "per-sample Jacobians J_b" in result.stdout


def test_cli_explains_interacting_samples(write_spec: Callable[[str, str], Path]) -> None:
    text = case_spec(CASES[-3], seed_for(torch.Size([3, 2])))  # x - mean(x, 0)
    result = run_cli("walk", str(write_spec(text, "mean.yaml")))
    assert result.code == 0, (result.stdout, result.stderr)
    assert "✗" not in result.stdout
    assert "no per-sample Jacobians: the samples interact" in flat(result.stdout)


# --- two inputs with one batch; the size limits -------------------------------------------------


def test_two_inputs_with_one_batch() -> None:
    text = """
name: two_inputs
seed: 0
inputs:
  x: {rand: [4, 2], requires_grad: true}
  y: {rand: [4, 2], requires_grad: true}
forward: ["a = squeeze(x * y)", "pred = sigmoid(a)"]
grad:
  - {of: pred, wrt: [x, y], grad_outputs: ones}
"""
    built = build(load_spec_text(text))
    x, y = built.input("x").detach(), built.input("y").detach()
    on_x = torch.autograd.functional.jacobian(lambda t: torch.sigmoid((t * y).squeeze()), x)
    on_y = torch.autograd.functional.jacobian(lambda t: torch.sigmoid((x * t).squeeze()), y)
    lessons = vjp_lessons(load_spec_text(text))
    assert [lesson.wrt for lesson in lessons] == ["x", "y"]
    for lesson, jacobian in zip(lessons, (on_x, on_y), strict=True):
        assert lesson.per_sample is not None
        assert close(lesson.per_sample.jacobian, diagonal_blocks(jacobian))
        assert close(lesson.result, jacobian.sum(dim=(0, 1)))
        assert lesson.verified, lesson.identities



def test_samples_checked_apart_when_j_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """J too large to keep in the lesson: it is still computed to check that the samples do not
    interact, and the per-sample identities are still made."""
    monkeypatch.setattr(vjp, "JACOBIAN_LIMIT", 0)
    text = squeezed_multi_output()
    squeezed, _, x = squeezed_mlp(text)
    jacobian = torch.autograd.functional.jacobian(squeezed, x.detach())
    lesson = vjp_lessons(load_spec_text(text))[0]
    assert lesson.jacobian is None
    assert lesson.per_sample is not None
    assert close(lesson.per_sample.jacobian, diagonal_blocks(jacobian))
    assert "cross-sample blocks of J are zero: ∂pred[b]/∂x_temp[c] = 0 for b ≠ c" in texts(lesson)
    assert lesson.verified, lesson.identities


@pytest.mark.parametrize(("limit", "value", "words"), [
    ("SAMPLES_JACOBIAN_LIMIT", 0, "too large here to check that the samples of pred"),
    ("PER_SAMPLE_LIMIT", 59, "10 blocks of 3×2 are more than 59 numbers"),
    ("COLUMNS_LIMIT", 2, "pred has 3 outputs per sample, more than 2"),
])
def test_limits_skip_the_blocks_and_say_so(monkeypatch: pytest.MonkeyPatch, limit: str,
                                           value: int, words: str) -> None:
    monkeypatch.setattr(vjp, "JACOBIAN_LIMIT", 0)
    monkeypatch.setattr(vjp, limit, value)
    text = squeezed_multi_output()
    squeezed, _, x = squeezed_mlp(text)
    pred = squeezed(x)
    lesson = vjp_lessons(load_spec_text(text))[0]
    assert lesson.per_sample is None
    assert lesson.per_sample_skipped is not None and words in lesson.per_sample_skipped
    assert close(lesson.result, torch.autograd.grad(pred, x, torch.ones_like(pred))[0])
    assert lesson.verified, lesson.identities


# --- the reason reaches the reader, and survives the codec --------------------------------------


def interacting_lessons() -> tuple[VjpLesson, ...]:
    return vjp_lessons(load_spec_text(case_spec(CASES[-2], seed_for(torch.Size([3, 2])))))


def test_renderers_say_why_there_are_no_blocks() -> None:
    lessons = interacting_lessons()
    reason = lessons[0].per_sample_skipped
    assert reason is not None
    words = flat(plain_text(vjp_text(lessons), width=100))
    assert flat(reason) in words
    assert "per-sample Jacobians J_b" not in words and "✗" not in words
    for level in (1, 2, 6):
        markdown = vjp_markdown(lessons, level, Naming())
        assert_markdown_well_formed(markdown)
        assert "samples interact" in markdown
        assert "FAILED" not in markdown


def test_reason_survives_the_json_codec() -> None:
    lessons = interacting_lessons() + vjp_lessons(load_spec_text(BUG_SPEC))
    assert lessons[0].per_sample_skipped is not None
    assert lessons[-1].per_sample is not None
    data = json.loads(json.dumps(to_data(lessons)))
    assert from_data(tuple[VjpLesson, ...], data) == lessons
