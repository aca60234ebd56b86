"""A capture leaves nothing behind: once `explain()` or a walk returns (or raises), every build it
made, every tensor its forwards made and every gradient is freed. torch keeps the hooks a module's
backward hooks put on the graph during the forward, and a hook that reaches the pass's tensors
closes a cycle through torch's C++ nodes that Python's collector cannot see: each capture then
lived as long as the process (90 MB a call for a 50-layer MLP, in a notebook or a loop).

Each model records weak references to itself (the build explained, a deep copy) and to what its
forward makes, in a list of the test's: after the capture and a collection, none may be alive."""

from __future__ import annotations

import gc
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.autograd import Function

from gradexplain import explain
from gradexplain.errors import GradexplainError
from tests.helpers.capture import capture_text
from tests.helpers.cli import SPECS

# What the models' forwards made, weakly: a module-level list, which a deep copy does not copy.
MADE: list[weakref.ref[Any]] = []
FORWARDS: list[str] = []  # each forward that ran, by its module's class


def remember(module: nn.Module, *items: Any) -> None:
    FORWARDS.append(type(module).__name__)
    MADE.extend(weakref.ref(item) for item in (module, *items))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(nn.Sequential(nn.Linear(6, 6), nn.ReLU()) for _ in range(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.layers(x)
        remember(self, out)
        return out


class TiedResidual(nn.Module):
    """A tied weight, a residual sum and `e + exp(e)`: tensors used twice."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.tanh(self.a(x))
        out: torch.Tensor = self.b(e + torch.exp(e)) + x
        remember(self, e, out)
        return out


class ConvInplace(nn.Module):
    """Convolution, batch norm and an in-place ReLU on its output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.norm = nn.BatchNorm2d(3)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.norm(self.conv(x))
        out: torch.Tensor = self.relu(hidden).mean((2, 3))
        remember(self, hidden, out)
        return out


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attend = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.attend(x, x, x)[0]
        remember(self, out)
        return out


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(3, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.gru(x)[0]
        remember(self, out)
        return out


class UserHooked(nn.Module):
    """The user's own module hooks and a tensor hook that doubles the gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.linear.register_full_backward_hook(lambda module, grad_in, grad_out: None)
        self.linear.register_forward_hook(lambda module, inputs, output: None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x)
        out.register_hook(lambda grad: grad * 2)
        remember(self, out)
        return out


class SameOrNot(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 3 if a is b else a * b


class GraphChanges(nn.Module):
    """A child asks whether its two arguments are one tensor: full hooks wrap each argument on
    its own, the full pass computes another graph, and is checked on a run with full hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.same = SameOrNot()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.linear(x)
        out: torch.Tensor = self.same(hidden, hidden)
        remember(self, hidden, out)
        return out


class DoublesInput(nn.Module):
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden.mul_(2)
        return hidden + 1


class InPlaceOnHooked(nn.Module):
    """A child changes its input in place: torch refuses full hooks there, the pass runs
    again without them."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 4)
        self.doubles = DoublesInput()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.doubles(self.linear(x))
        remember(self, out)
        return out


class FailsInBackward(Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("this backward always fails")


class BackwardFails(nn.Module):
    """The model's own backward raises: the capture raises, during the first pass's backward."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = FailsInBackward.apply(self.linear(x))
        remember(self, out)
        return out


class ForwardFails(nn.Module):
    """The forward raises after its first layer ran: the capture raises."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        remember(self, out)
        raise ValueError("this forward always fails")


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp": (Mlp, (2, 6)),
    "tied residual": (TiedResidual, (2, 4)),
    "conv, batch norm, in-place relu": (ConvInplace, (1, 2, 5, 5)),
    "attention": (Attention, (1, 3, 8)),
    "gru": (Recurrent, (1, 2, 3)),
    "user's hooks": (UserHooked, (2, 3)),
    "full hooks change the graph": (GraphChanges, (2, 3)),
    "full hooks refused": (InPlaceOnHooked, (2, 3)),
}


def alive() -> list[Any]:
    gc.collect()
    return [item for item in (ref() for ref in MADE) if item is not None]


@pytest.fixture(autouse=True)
def forget() -> None:
    MADE.clear()
    FORWARDS.clear()


@pytest.mark.parametrize("name", MODELS)
def test_explain_frees_every_build_and_tensor(name: str) -> None:
    make, shape = MODELS[name]
    model = make()
    explain(model, torch.randn(*shape))
    # A build for each pass and the check run, each a deep copy that ran its forward.
    assert len(FORWARDS) >= 3
    left = alive()
    assert left == [], f"alive after explain(): {[type(item).__name__ for item in left]}"


@pytest.mark.parametrize("make", [ForwardFails, BackwardFails])
def test_a_capture_that_raises_frees_what_it_made(make: Callable[[], nn.Module]) -> None:
    with pytest.raises(GradexplainError):
        explain(make(), torch.randn(2, 3))
    assert FORWARDS, "the forward ran"
    left = alive()
    assert left == [], f"alive after the error: {[type(item).__name__ for item in left]}"


def tensors_alive() -> int:
    gc.collect()
    # issubclass on the type: isinstance asks some of torch's deprecated objects, which warn.
    return sum(issubclass(type(item), torch.Tensor) for item in gc.get_objects())


def test_a_spec_walk_leaves_no_tensor_behind() -> None:
    text = (SPECS / "two_modules.yaml").read_text(encoding="utf-8")
    session = capture_text(text, "specs/two_modules.yaml")  # the first: torch's own caches fill
    del session
    before = tensors_alive()
    for _ in range(3):
        session = capture_text(text, "specs/two_modules.yaml")
        del session
    # At most as many as before: what an earlier test left may be freed meanwhile.
    assert tensors_alive() <= before


# What a model keeps of its forwards beyond the capture: a module-level list, which no deep copy
# separates from the builds.
KEPT: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []


class KeepsItsGraph(nn.Module):
    """Keeps, of each forward, its input, its layer's weight and a second output of the layer
    that the loss does not use (so that its graph is not backpropagated in the pass); the
    user's own full hook is on the layer, so that the graph kept carries its wrapper too."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.linear.register_full_backward_hook(lambda module, grad_in, grad_out: None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x)
        KEPT.append((x, self.linear(x), self.linear.weight))
        return out


def test_a_graph_kept_beyond_its_pass_backpropagates_as_plain_torch() -> None:
    """torch keeps the hooks it registered on each pass's graph for the module hooks (ours and
    the user's, wrapped); once the pass is over ours do nothing: no record, no error. (The
    legacy pass's graph is left out: a legacy hook's wrapper on the graph refuses to run once
    its module is gone, as torch's always does, and each pass's build is gone with its pass.)"""
    KEPT.clear()
    try:
        with warnings.catch_warnings():
            # torch's notice that a full hook fires with no input requiring grad (the weight's
            # gradient alone is asked for): what torch says, not what is tested.
            warnings.simplefilter("ignore", UserWarning)
            explain(KeepsItsGraph(), torch.randn(4, 3))
            assert len(KEPT) >= 3  # the legacy pass, the full pass, the check run
            for x, side, weight in KEPT[1:]:
                (grad,) = torch.autograd.grad(side.sum(), weight)
                torch.testing.assert_close(grad, x.detach().sum(0).expand(2, 3))
    finally:
        KEPT.clear()  # the builds it keeps alive
