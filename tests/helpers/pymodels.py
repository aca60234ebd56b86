"""Python models for the tests of `gradexplain walk FILE.py:NAME` and `gradexplain.explain()`.

Each model has a zero-argument factory (`make_mlp`, `make_cnn`, ...) that the tests call under
`torch.manual_seed(0)` to rebuild, in plain PyTorch, exactly the model gradexplain loaded. The
module-level instances are made under their own seeded, forked RNG, so importing this file never
touches the caller's random state and `MLP_INSTANCE` holds the weights `make_mlp()` makes after
`torch.manual_seed(0)`.

The broken things at the end exist for the error tests: a factory that needs arguments, a model
returning a dict, a forward that raises, something that is not a module at all.
"""

from __future__ import annotations

import torch
from torch import nn

# --- good models --------------------------------------------------------------------------------


class MLP(nn.Module):
    """3 features in, 2 out: encoder (Linear, ReLU, Linear, Tanh) then a Linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.head(self.encoder(x))
        return result


def make_mlp() -> MLP:
    return MLP()


MLP_INPUT = (4, 3)


class CNN(nn.Module):
    """Conv2d -> ReLU -> MaxPool2d -> Flatten -> Linear, for images of shape (N, 1, 6, 6)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, kernel_size=3)  # 6x6 -> 4x4
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)  # 4x4 -> 2x2
        self.flat = nn.Flatten()
        self.fc = nn.Linear(2 * 2 * 2, 3)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.fc(self.flat(self.pool(self.act(self.conv(images)))))
        return result


def make_cnn() -> CNN:
    return CNN()


CNN_INPUT = (2, 1, 6, 6)


class TwoInputs(nn.Module):
    """forward(x, y): each through its own Linear, multiplied."""

    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Linear(3, 2)
        self.right = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.left(x) * self.right(y)
        return result


def make_two_inputs() -> TwoInputs:
    return TwoInputs()


TWO_INPUTS = ((4, 3), (4, 5))


class TupleOut(nn.Module):
    """One input, two outputs: the loss is the sum of both outputs' sums (or means)."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(3, 4)
        self.first = nn.Linear(4, 2)
        self.second = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.trunk(x))
        return self.first(hidden), torch.sigmoid(self.second(hidden))


def make_tuple_out() -> TupleOut:
    return TupleOut()


class Block(nn.Module):
    """One small residual block of the deep model."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = x + self.act(self.linear(x))
        return result


DEEP_BLOCKS = 30
DEEP_WIDTH = 4


def make_deep() -> nn.Sequential:
    return nn.Sequential(*[Block(DEEP_WIDTH) for _ in range(DEEP_BLOCKS)])


DEEP_INPUT = (3, DEEP_WIDTH)


def _seeded_instance() -> MLP:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make_mlp()


# An instance, for `tests/helpers/pymodels.py:MLP_INSTANCE`: the same weights as make_mlp()
# at seed 0.
MLP_INSTANCE = _seeded_instance()


# --- broken things, for the error tests ---------------------------------------------------------


def make_sized(width: int) -> nn.Module:
    """A factory that needs an argument: gradexplain cannot call it."""
    return nn.Linear(width, width)


NOT_A_MODEL = 42


def make_not_a_module() -> object:
    """A factory returning something that is not an nn.Module."""
    return {"weights": [1.0, 2.0]}


class ReturnsDict(nn.Module):
    """A model returning a dict: its loss is taken of `--loss-of logits` (or of every tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": self.linear(x)}


def make_returns_dict() -> ReturnsDict:
    return ReturnsDict()


class Raises(nn.Module):
    """A forward that checks its input itself and raises a ValueError of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != 3:
            raise ValueError(f"expected 3 features, got {x.shape[-1]}")
        result: torch.Tensor = self.linear(x)
        return result


def make_raises() -> Raises:
    return Raises()


class Asserts(nn.Module):
    """A forward that checks its input with `assert`, as much research code does."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[-1] == 3, f"expected 3 features, got {x.shape[-1]}"
        result: torch.Tensor = self.linear(x)
        return result


def make_asserts() -> Asserts:
    return Asserts()


# --- models that expose known bugs (see capture/test_pymodel_fixed_bugs.py) ---------


def make_dropout() -> nn.Sequential:
    """Dropout in training mode: each forward draws a new mask from torch's RNG."""
    return nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5), nn.Linear(8, 2))


class SelfAttention(nn.Module):
    """nn.MultiheadAttention as self-attention (`attn(x, x, x)`): under full hooks its
    `query is key` test is false, so the full pass computes another graph."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.attn(x, x, x, need_weights=False)[0]
        return out


class TransposedProduct(nn.Module):
    """An unnamed intermediate (`x * 2`) whose only use is a transpose: `(x * 2).t() @ w.t()`."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2).t() @ self.weight.t()


def make_transposed_product() -> TransposedProduct:
    return TransposedProduct()
