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


def two_modules_in_torch() -> dict[str, torch.Tensor]:
    """The article's model run by hand: every gradient the walk reports, from torch itself."""
    model = TwoModules()
    x = torch.tensor(5.0, requires_grad=True)
    y = model.module(x)
    y.retain_grad()
    t = model.module2.l(y)
    t.retain_grad()
    z = model.module2.activation(t)
    z.backward()
    found = {"x": x.grad, "y": y.grad, "t": t.grad, "module.p": model.module.p.grad,
             "module2.l.weight": model.module2.l.weight.grad, "y value": y, "z value": z}
    return {name: value.detach() for name, value in found.items() if value is not None}


def legacy_hook_warnings() -> list[tuple[str, str]]:
    """What torch itself warns, (category, message), when the article's model runs with
    `register_backward_hook` on every module (as gradexplain's legacy pass hooks it): the oracle
    for the warnings a walk records, so no test writes torch's wording down."""
    import warnings

    model = TwoModules()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handles = [module.register_backward_hook(lambda module, grad_input, grad_output: None)
                   for module in model.modules()]
        model(torch.tensor(5.0, requires_grad=True)).backward()
    for handle in handles:
        handle.remove()
    return [(item.category.__name__, str(item.message)) for item in caught]
