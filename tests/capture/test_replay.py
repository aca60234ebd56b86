"""The hook-free check run (capture/replay.py) against plain PyTorch: the same model written here,
with no hooks and no gradexplain, and `torch.autograd.grad` of its output give the gradient at
every named tensor's position, each use's share of a tensor used twice, and a seeded call's
vector-Jacobian product; a traced graph that does not match is refused."""

from __future__ import annotations

import pytest
import torch

from gradexplain.capture.build import build
from gradexplain.capture.replay import Replay, ReplayMismatch, RunValues
from gradexplain.capture.trace import trace
from gradexplain.language import load_spec_text
from gradexplain.records.graph import GraphView, Signature
from gradexplain.records.trace import Mode
from tests.helpers.graphs import SEED, SEEDED_SPEC, SHARED_SPEC, W, X, plain_shared

Ranked = tuple[int, int]


def replayed(text: str, mode: Mode = "legacy") -> tuple[GraphView, Replay]:
    spec = load_spec_text(text)
    view = GraphView(trace(build(spec), mode))
    return view, Replay(spec, view.trace, view.signature())


def only_run(view: GraphView, replay: Replay) -> RunValues:
    (run,) = view.trace.runs
    return replay.runs[run.index]


def ranked(view: GraphView, name: str) -> Ranked:
    record = view.trace.named(name)
    assert record is not None, name
    found = view.resolve(view.raw_position(record.index))
    assert found is not None, name
    return view.rank[found[0]], found[1]


def close(got: torch.Tensor | None, want: torch.Tensor) -> bool:
    assert got is not None
    return torch.allclose(got.detach(), want.detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["legacy", "full"])
def test_the_gradient_at_each_named_tensor_is_torchs(mode: Mode) -> None:
    tensors = plain_shared()
    names = ["x", "m.w", "h"]
    want = torch.autograd.grad(tensors["s"], [tensors[name] for name in names])
    view, replay = replayed(SHARED_SPEC, mode)
    values = only_run(view, replay)
    for name, expected in zip(names, want, strict=True):
        assert close(values.totals[ranked(view, name)], expected), name


def test_each_use_of_a_tensor_used_twice_gets_its_own_share() -> None:
    """x feeds tanh inside m and the product after it. Each use's share is what torch gives
    when the other use is detached; the two shares add up to x's whole gradient."""
    x = torch.tensor(X, requires_grad=True)
    w = torch.tensor(W)
    (through_tanh,) = torch.autograd.grad(((torch.tanh(x) * w) * x.detach()).sum(), x)
    (through_mul,) = torch.autograd.grad(((torch.tanh(x.detach()) * w) * x).sum(), x)
    view, replay = replayed(SHARED_SPEC)
    values = only_run(view, replay)
    record = view.trace.named("x")
    assert record is not None
    at_x = view.resolve(view.raw_position(record.index))
    assert at_x is not None
    shares = {view.name_of(node): values.edges[(view.rank[node], number)]
              for node, number in view.consumers[at_x]}
    assert sorted(shares) == ["MulBackward0", "TanhBackward0"]
    assert close(shares["TanhBackward0"], through_tanh)
    assert close(shares["MulBackward0"], through_mul)
    assert not close(shares["MulBackward0"], through_tanh)
    assert close(values.totals[ranked(view, "x")], through_tanh + through_mul)


def test_a_seeded_call_is_the_vector_jacobian_product() -> None:
    x = torch.tensor(X, requires_grad=True)
    w = torch.tensor(W, requires_grad=True)
    h = torch.tanh(x) * w
    seed = torch.tensor(SEED)
    want_x, want_w = torch.autograd.grad(h, [x, w], seed)
    view, replay = replayed(SEEDED_SPEC)
    values = only_run(view, replay)
    assert values.seed is not None and close(values.seed, seed)
    assert close(values.totals[ranked(view, "x")], want_x)
    assert close(values.totals[ranked(view, "m.w")], want_w)
    # The seed matters: ones would give another gradient.
    (with_ones,) = torch.autograd.grad(torch.tanh(x) * w, x, torch.ones(3))
    assert not close(values.totals[ranked(view, "x")], with_ones)


def test_a_traced_graph_that_does_not_match_is_refused() -> None:
    spec = load_spec_text(SHARED_SPEC)
    view = GraphView(trace(build(spec), "legacy"))
    shape = view.signature()
    (name, edges), *rest = shape
    relinked = ((name, tuple((None, number) for _, number in edges)), *rest)
    wrongs: list[Signature] = [shape[:-1], tuple(reversed(shape)),
                               (*shape, ("AddBackward0", ())), relinked]
    for wrong in wrongs:
        with pytest.raises(ReplayMismatch):
            Replay(spec, view.trace, wrong)
    Replay(spec, view.trace, shape)
