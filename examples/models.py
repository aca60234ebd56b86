"""Python models for `gradexplain walk examples/models.py:NAME --input SHAPE` (see the README).

Each name is a zero-argument function returning an nn.Module; gradexplain calls it with torch's
RNG seeded, so the weights (and every figure it prints) are the same on every run.
"""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """A two-layer encoder and a linear head: `gradexplain walk ...:make_mlp --input 4x3`."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.head(self.encoder(x))
        return result


class Block(nn.Module):
    """One repeated block of `make_deep`: Linear then ReLU."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.act(self.linear(x))
        return result


def make_mlp() -> nn.Module:
    return MLP()


def make_cnn() -> nn.Module:
    """A small CNN for 1x1x8x8 images: `--input 2x1x8x8`."""
    return nn.Sequential(
        nn.Conv2d(1, 4, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 8, kernel_size=3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(8, 3))


def make_deep() -> nn.Module:
    """50 identical blocks of width 256 (`--input 32x256`): the scale benchmark's model."""
    return nn.Sequential(*[Block(256) for _ in range(50)])
