"""The hook-free check run (capture/replay.py) against plain PyTorch: the same model written here,
with no hooks and no gradexplain, and `torch.autograd.grad` of its output give the gradient at
every named tensor's position, each use's share of a tensor used twice, and a seeded call's
vector-Jacobian product; a traced graph that does not match is refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

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


class _Mixed(nn.Module):
    """A Linear (its transposed weight), a broadcast bias, a tensor used twice, an op with two
    outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.shift = nn.Parameter(torch.tensor([0.5, -1.0, 2.0, 0.25]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc(x.flatten(1)[:, :3])) + self.shift
        left, right = h.chunk(2, dim=1)
        return (left * right * left).sum(dim=1)


class _Residual(nn.Module):
    """A convolution and a Linear each reading a tensor the residual add reads too, a node
    whose two edges meet below (as in a recurrent cell), one whose other edge reaches the same
    tensor through a chain of one-edge nodes ending at a leaf, and a Linear applied twice (its
    weight and bias used by two nodes)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.fc = nn.Linear(8, 8)
        self.twice = nn.Linear(8, 8)
        self.shift = nn.Parameter(torch.linspace(-1.0, 1.0, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x)
        y = (self.conv(h) + h).flatten(1)
        s = torch.tanh(y)
        y = (s + y) - s  # the subtraction's two edges meet below: s is reached both ways
        g = self.fc(y) + y
        e = torch.tanh(self.shift)
        g = g + (e + torch.exp(e))  # the add reads e directly and through exp, down to a leaf
        out: torch.Tensor = (self.twice(g) + self.twice(torch.sin(g))).sum(dim=1)
        return out


@pytest.mark.parametrize("make", [_Mixed, _Residual], ids=["mixed", "residual"])
def test_every_edge_share_is_what_the_nodes_own_backward_gives(
        make: type[nn.Module], monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _shares_checked(make, monkeypatch)
    if make is _Residual:
        assert len(engine) >= 2  # the convolution's and the Linear's input, at least


def _shares_checked(make: type[nn.Module], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each edge's share is read from what the engine passed on where the edge is its tensor's
    only use, from the engine run again from the node alone where the tensor has other uses
    and the node's other edges lead to leaves (a convolution's or Linear's input in a residual
    block), and from the node run again on its own otherwise: each must be what torch's node
    computes for that edge from its incoming gradient, reduced to the input's shape as the
    engine reduces a broadcast one. Written here against torch's own nodes. The edges whose
    shares came from the engine run from their node are returned."""
    from gradexplain.capture.pymodel import python_source

    engine: list[int] = []
    real_engine = Replay.engine_shares

    def counted(self: Replay, node: object, shared: list[int], totals: object) -> object:
        found = real_engine(self, node, shared, totals)  # type: ignore[arg-type]
        if found is not None:
            engine.extend(shared)
        return found

    monkeypatch.setattr(Replay, "engine_shares", counted)
    torch.manual_seed(0)
    source = python_source(make(), (torch.randn(5, 2, 2, 2),), make.__name__)
    traced = trace(source.build(), "legacy")
    view = GraphView(traced)
    replay = Replay(source.spec, traced, view.signature(), source.build)
    (values,) = replay.runs.values()
    counted_uses = {"one use": 0, "several uses": 0}
    for node in replay.order:
        if node.name() == "torch::autograd::AccumulateGrad":
            continue
        rank = replay.rank[node]
        incoming = [values.totals.get((rank, number))
                    for number in range(len(node._input_metadata))]
        if all(grad is None for grad in incoming):
            continue
        filled = [torch.zeros(meta.shape) if grad is None else grad
                  for grad, meta in zip(incoming, node._input_metadata, strict=True)]
        with torch.no_grad():
            shares = node(*filled)
        shares = shares if isinstance(shares, tuple) else (shares,)
        for number, (share, (child, output)) in enumerate(
                zip(shares, node.next_functions, strict=False)):
            if child is None:
                continue
            want = share.sum_to_size(tuple(child._input_metadata[output].shape))
            got = values.edges.get((rank, number))
            assert got is not None and torch.allclose(got, want, rtol=1e-6, atol=1e-7), (
                node.name(), number)
            uses = replay.uses.get((child, output), 0)
            counted_uses["one use" if uses == 1 else "several uses"] += 1
    assert counted_uses["one use"] > 3 and counted_uses["several uses"] >= 2, counted_uses
    return engine


def test_an_edge_the_engine_refuses_to_run_from_its_node_is_run_on_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where running the engine from a node alone raises, the node's backward is run again on
    its own, as for any other node: the shares are still torch's."""
    from torch.autograd.graph import GradientEdge

    real_grad = torch.autograd.grad
    refused: list[int] = []

    def refusing(outputs: object, *args: object, **kwargs: object) -> object:
        if isinstance(outputs, list) and outputs and isinstance(outputs[0], GradientEdge):
            refused.append(1)
            raise RuntimeError("refused here")
        return real_grad(outputs, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(torch.autograd, "grad", refusing)
    assert _shares_checked(_Residual, monkeypatch) == []
    assert refused
