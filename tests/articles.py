"""The source material's own classes, written as the articles write them, for tests to hook by hand.

Plain PyTorch, nothing from gradexplain: these are the oracle side of the tests.
"""

from __future__ import annotations

import torch
from torch import nn


class MyModule(nn.Module):
    """The register_backward_hook article's first module: `self.p * x`, p = (3, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.t = torch.tensor((3.0, 4.0))
        self.p = nn.Parameter(self.t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.p * x


class MyModule2(nn.Module):
    """The article's second module: Linear(2, 1, bias=False) then Sigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(2, 1, bias=False)
        self.activation = nn.Sigmoid()
        # The weight the article printed; literal, so no seeding is needed.
        with torch.no_grad():
            self.l.weight.copy_(torch.tensor([[-0.1490, 0.0568]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.activation(self.l(x))
        return result


class TwoModules(nn.Module):
    """specs/two_modules.yaml's top level: `y = module(x)`, then `z = module2(y)`."""

    def __init__(self) -> None:
        super().__init__()
        self.module = MyModule()
        self.module2 = MyModule2()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.module2(self.module(x))
        return result
