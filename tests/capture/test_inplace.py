"""In-place ops on what full backward hooks wrap (issue 17 item 4): torch refuses full hooks on
those modules only, so gradexplain leaves them off those modules, hooks everything else, and
says why. Oracle: plain torch in this file. A module counts as refused when, in plain torch,
`register_full_backward_hook` on that module alone makes forward + backward raise; the legacy
hooks' values are what plain `register_backward_hook` hooks receive.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import pytest
import torch
from torch import nn

from gradexplain.api import explain
from gradexplain.capture import pipeline
from gradexplain.capture.build import Builder
from gradexplain.capture.inplace import Probe, probe_inplace
from gradexplain.errors import HookRefusedError
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import Walk
from tests.helpers.capture import capture_text
from tests.helpers.pycli import CLI
from tests.helpers.pyoracle import leaves, torch_hook_calls, torch_inputs, torch_model
from tests.helpers.resnet import RESNET_INPUT, make_resnet18

Factory = Callable[[], nn.Module]
Grads = tuple[torch.Tensor | None, ...]
PlainCalls = dict[str, list[tuple[Grads, Grads]]]
RESNET_SHAPE = (2, *RESNET_INPUT[1:])  # BatchNorm in train mode needs 2 samples at layer4's 1x1


@contextmanager
def one_thread() -> Iterator[None]:
    """The plain runs use one intra-op thread, as gradexplain does by default: resnet's
    BatchNorms over two samples amplify the last-bit differences another thread count makes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def torch_refuses(make: Factory, inputs: Sequence[torch.Tensor]) -> set[str]:
    """Each module on which plain torch refuses a full backward hook, tried one at a time."""
    made = torch_model(make)
    refused = set()
    for path, _ in made.named_modules():
        model = copy.deepcopy(made)
        model.get_submodule(path).register_full_backward_hook(lambda *args: None)
        leaves = [tensor.detach().clone().requires_grad_() for tensor in inputs]
        try:
            with one_thread():
                model(*leaves).sum().backward()
        except (RuntimeError, TypeError):  # TypeError: a result it cannot rebuild
            refused.add(path)
    return refused


@functools.cache
def resnet_refused() -> frozenset[str]:
    return frozenset(torch_refuses(make_resnet18, leaves(torch_inputs(RESNET_SHAPE))))


def refused_in(walk: Walk) -> set[str]:
    full = next(item for item in walk.passes if item.mode == "full")
    return {refusal.module for refusal in full.refusals}


def full_targets(walk: Walk) -> set[str]:
    full = next(item for item in walk.passes if item.mode == "full")
    return {event.target for event in full.events
            if event.hook in ("full_backward", "full_backward_pre")}


def assert_recorded(value: TensorValue | None, want: torch.Tensor | None, what: str) -> None:
    """A recorded hook argument equals what plain torch's hook got: every value, or for a
    tensor recorded as a summary its min, max, mean and norm."""
    if want is None:
        assert value is None, f"{what}: torch gave None"
        return
    assert value is not None and value.shape == tuple(want.shape), what
    plain = want.detach().double()
    if value.summary is None:
        assert value.value is not None
        torch.testing.assert_close(torch.tensor(value.value, dtype=torch.float64), plain,
                                   rtol=1e-5, atol=1e-6, msg=what)
        return
    summary = value.summary
    got = torch.tensor([summary.min, summary.max, summary.mean, summary.norm],
                       dtype=torch.float64)
    expected = torch.stack([plain.min(), plain.max(), plain.mean(),
                            torch.linalg.vector_norm(plain)])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=what)


def assert_legacy_values(walk: Walk, make: Factory, inputs: Sequence[torch.Tensor]) -> None:
    """Every legacy module hook call gradexplain recorded holds what plain legacy hooks get."""
    with one_thread():
        plain = torch_hook_calls(make, inputs, "legacy")
    assert_hook_values(walk, "legacy", "backward",
                       {path: [(call.grad_input, call.grad_output) for call in calls]
                        for (_, path), calls in plain.items()})


def assert_hook_values(walk: Walk, mode: str, hook: str, plain: PlainCalls) -> None:
    """Every `hook` call of the `mode` pass holds what plain torch's hook got on that call of
    that module (`plain`: by module path, each call's (grad_input, grad_output))."""
    recorded = next(item for item in walk.passes if item.mode == mode)
    seen: dict[str, int] = {}
    for event in recorded.events:
        if event.hook != hook:
            continue
        number = seen.get(event.target, 0)
        seen[event.target] = number + 1
        grad_input, grad_output = plain[event.target][number]
        args = {arg.name: arg.value for arg in event.args}
        for prefix, grads in (("grad_input", grad_input), ("grad_output", grad_output)):
            for index, grad in enumerate(grads):
                assert_recorded(args[f"{prefix}[{index}]"], grad, f"{event.target} {prefix}")
    assert seen == {path: len(calls) for path, calls in plain.items()}


# --- resnet18 as torchvision ships it ---------------------------------------------------------


@pytest.fixture(scope="module")
def resnet_walk() -> Walk:
    result = explain(torch_model(make_resnet18), *leaves(torch_inputs(RESNET_SHAPE)))
    return result.walk


def test_resnet18_walks_with_every_check_verified(resnet_walk: Walk) -> None:
    assert resnet_walk.failures() == []
    assert len(resnet_walk.checks()) > 1000


def test_resnet18_refuses_exactly_what_torch_refuses(resnet_walk: Walk) -> None:
    expected = resnet_refused()
    assert "layer1.0.bn2" in expected and "layer1.0.relu" in expected  # the test can fail
    assert refused_in(resnet_walk) == expected
    hooked = full_targets(resnet_walk)
    assert not hooked & expected
    every = {path for path, _ in torch_model(make_resnet18).named_modules()}
    assert hooked == every - expected  # everything else keeps its full hooks, and they fire


def test_resnet18_refusals_name_the_op_and_where(resnet_walk: Walk) -> None:
    full = next(item for item in resnet_walk.passes if item.mode == "full")
    found = {(item.module, item.reason, item.op, item.operator, item.where)
             for item in full.refusals}
    assert ("layer1.0.bn2", "output", "add_", "+=", "layer1.0") in found
    assert ("layer1.0.bn1", "output", "relu_", None, "layer1.0.relu") in found
    assert ("layer1.0.relu", "input", "relu_", None, "layer1.0.relu") in found
    text = resnet_walk_text(resnet_walk)
    assert ("torch refuses full backward hooks on layer1.0.bn2: its output is modified in "
            "place by `+=` (add_) in layer1.0.forward; its legacy hook is shown, its full "
            "hooks are not registered") in text


def resnet_walk_text(walk: Walk) -> str:
    from rich.console import Console

    from gradexplain.render.text_walk import walk_text

    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(walk_text(walk))
    return console.export_text()


def test_resnet18_legacy_values_are_plain_legacy_hooks(resnet_walk: Walk) -> None:
    assert_legacy_values(resnet_walk, make_resnet18, leaves(torch_inputs(RESNET_SHAPE)))


def test_resnet18_cli_walk_exits_0_with_refusals_in_json(cli: CLI) -> None:
    result = cli("walk", "tests/helpers/resnet.py:make_resnet18", "--input",
                 "x".join(map(str, RESNET_SHAPE)), "--format", "json")
    assert result.code == 0, result.stderr
    passes = {item["mode"]: item for item in json.loads(result.stdout)["passes"]}
    assert passes["legacy"]["refusals"] == []
    modules = {item["module"] for item in passes["full"]["refusals"]}
    assert modules == resnet_refused()
    assert all(item["text"].startswith(f"torch refuses full backward hooks on {item['module']}")
               for item in passes["full"]["refusals"])


# --- small models, one in-place pattern each --------------------------------------------------


class InPlaceOnInput(nn.Module):
    """Changes its (non-leaf) input in place inside its forward."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h.mul_(2)
        return h + 1


class WithInPlaceChild(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.twice = InPlaceOnInput()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.twice(self.lin(x)))  # type: ignore[no-any-return]


class CallerChangesOutput(nn.Module):
    """The caller adds to a module's output in place (`h += 1`), then goes on."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        h += 1
        return self.act(h)  # type: ignore[no-any-return]


class SliceAssigned(nn.Module):
    """Writes into a module's output through an index: `h[:, 0] = 0`."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        h[:, 0] = 0.0
        return self.out(h)  # type: ignore[no-any-return]


class Sorts(nn.Module):
    """Returns `h.sort(1)`: a torch.return_types.sort, which torch's full-hook wrapper cannot
    rebuild (it calls the type with the items; that type takes one sequence)."""

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return h.sort(1)


class Maxes(nn.Module):
    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.max(h, 1)


class Pair(NamedTuple):
    values: torch.Tensor
    doubled: torch.Tensor


class PairOut(nn.Module):
    """A namedtuple: torch rebuilds it, so full hooks stay."""

    def forward(self, h: torch.Tensor) -> Pair:
        return Pair(h.sort(1).values, h * 2)


class StructuredResults(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.sorts = Sorts()
        self.maxes = Maxes()
        self.pair = PairOut()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.lin(x))
        ordered = self.sorts(h)
        top = self.maxes(h)
        pair = self.pair(h)
        mixed = ordered.values * 2 + top.values.unsqueeze(1) + pair.values * pair.doubled
        return self.head(mixed)  # type: ignore[no-any-return]


def relu_after_linear() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True), nn.Linear(4, 2))


def no_inplace() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


SMALL: dict[str, tuple[Factory, set[str]]] = {
    "relu_inplace_after_linear": (relu_after_linear, {"0", "1"}),
    "inplace_on_input_inside_module": (WithInPlaceChild, {"lin", "twice"}),
    "caller_inplace_on_output": (CallerChangesOutput, {"lin"}),
    "setitem_on_output": (SliceAssigned, {"lin"}),
    "no_inplace_at_all": (no_inplace, set()),
    "results_torch_cannot_rebuild": (StructuredResults, {"sorts", "maxes"}),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_models_refuse_exactly_what_torch_refuses(name: str) -> None:
    make, expected = SMALL[name]
    inputs = leaves(torch_inputs((5, 3)))
    assert torch_refuses(make, inputs) == expected  # what plain torch refuses, as written
    walk = explain(torch_model(make), *inputs).walk
    assert walk.failures() == []
    assert refused_in(walk) == expected
    every = {path for path, _ in torch_model(make).named_modules()}
    assert full_targets(walk) == every - expected
    assert_legacy_values(walk, make, inputs)


def test_small_model_refusal_ops() -> None:
    inputs = leaves(torch_inputs((5, 3)))
    for make, wanted in (
        (WithInPlaceChild, {("twice", "input", "mul_", None, "twice"),
                            ("lin", "output", "mul_", None, "twice")}),
        (CallerChangesOutput, {("lin", "output", "add_", "+=", "")}),
        (SliceAssigned, {("lin", "output", "__setitem__", "[...] =", "")}),
    ):
        walk = explain(torch_model(make), *inputs).walk
        full = next(item for item in walk.passes if item.mode == "full")
        assert {(item.module, item.reason, item.op, item.operator, item.where)
                for item in full.refusals} == wanted


# --- a spec: the language has ReLU(inplace: true) ---------------------------------------------

SPEC = """
name: relu_inplace
seed: 0
inputs:
  x: {randn: [2, 3], requires_grad: true}
modules:
  net:
    layers:
      l: {Linear: {in_features: 3, out_features: 2}}
      act: {ReLU: {inplace: true}}
    forward: {args: [x], steps: ["t = l(x)", "z = act(t)"]}
forward: ["z = net(x)", "s = sum(z)"]
backward: s
"""


def plain_spec_model() -> nn.Module:
    """The spec's `net` in plain torch: Linear then ReLU(inplace=True)."""
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(3, 2)
            self.act = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.l(x))  # type: ignore[no-any-return]
    return Net()


def test_spec_with_relu_inplace_walks_and_refuses_what_torch_refuses() -> None:
    session = capture_text(SPEC, "relu_inplace.yaml")
    walk = session.walk
    assert walk.failures() == []
    expected = torch_refuses(plain_spec_model, leaves(torch_inputs((2, 3))))
    assert expected == {"l", "act"}
    assert refused_in(walk) == {f"net.{path}" for path in expected}
    assert {"", "net"} <= full_targets(walk)
    # the tensor hook put on t before relu_ got ∂s/∂t, the gradient of t as it was
    legacy = next(item for item in walk.passes if item.mode == "legacy")
    tensor_t = [event for event in legacy.events
                if event.hook == "tensor" and event.target == "net.t"]
    assert len(tensor_t) == 1 and tensor_t[0].args[0].check is not None
    assert tensor_t[0].args[0].check.verified
    full = copy.deepcopy(session.trace("full"))
    assert full is not None and {item.module for item in full.refusals} == {"net.l", "net.act"}


def test_spec_relu_inplace_values_match_plain_torch() -> None:
    """The final .grads of the spec's walk equal plain torch's on the same weights."""
    walk = capture_text(SPEC, "relu_inplace.yaml").walk
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(2, 3, requires_grad=True)
        net = plain_spec_model()
    net(x).sum().backward()
    for walk_pass in walk.passes:
        grads = {grad.name: grad.value for grad in walk_pass.grads}
        assert_recorded(grads["x"], x.grad, f"{walk_pass.mode} x.grad")
        weight = net.get_submodule("l").get_parameter("weight")
        assert_recorded(grads["net.l.weight"], weight.grad, "weight")


# --- the fallback when the probe misses something ----------------------------------------------


def test_a_missed_refusal_is_retried_with_the_wider_set(monkeypatch: pytest.MonkeyPatch) -> None:
    real = probe_inplace

    def blind(fresh: Builder) -> Probe:
        found = real(fresh)
        return Probe((), tuple(type(item)(item.module, "aliased") for item in found.refusals))

    monkeypatch.setattr(pipeline, "probe_inplace", blind)
    walk = explain(torch_model(relu_after_linear), *leaves(torch_inputs((5, 3)))).walk
    assert walk.failures() == []
    assert refused_in(walk) == {"0", "1"}


def test_a_refusal_nothing_locates_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "probe_inplace", lambda fresh: Probe((), ()))
    with pytest.raises(HookRefusedError) as caught:
        explain(torch_model(relu_after_linear), *leaves(torch_inputs((5, 3))))
    assert caught.value.exit_code == 2
    assert "full backward hooks" in str(caught.value) and "\n" not in str(caught.value)


def test_a_result_torch_cannot_rebuild_is_said_and_the_other_full_hooks_are_torchs() -> None:
    inputs = leaves(torch_inputs((5, 3)))
    walk = explain(torch_model(StructuredResults), *inputs).walk
    assert walk.failures() == []
    full = next(item for item in walk.passes if item.mode == "full")
    lin = torch_model(StructuredResults).get_submodule("lin")
    h = torch.tanh(lin(inputs[0]))
    results = {"sorts": h.sort(1), "maxes": torch.max(h, 1)}
    assert {item.module: (item.reason, item.op) for item in full.refusals} == {
        path: ("return_type", type(result).__name__) for path, result in results.items()}
    # Plain torch with full hooks on every module but those two: what each hook got.
    model = torch_model(StructuredResults)
    got: PlainCalls = {}
    for path, module in model.named_modules():
        if path not in results:
            module.register_full_backward_hook(
                lambda module, grad_input, grad_output, path=path: got.setdefault(
                    path, []).append((grad_input, grad_output)))
    with one_thread():
        model(*leaves(inputs)).sum().backward()
    assert_hook_values(walk, "full", "full_backward", got)
