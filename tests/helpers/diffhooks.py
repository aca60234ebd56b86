"""Plain-torch backward hooks for the diff tests: every submodule of a model with legacy or with
full hooks (never both: torch refuses them on one module), the loss explain() uses by default
(the sum of the output). The oracle the diff's rows, values and verdicts are compared with."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch
from torch import nn

HookCalls = dict[str, list[tuple[tuple[Any, ...], tuple[Any, ...]]]]


def torch_hooks(model: nn.Module, inputs: tuple[torch.Tensor, ...], full: bool) -> HookCalls:
    """Each submodule's hook calls (grad_input, grad_output) on a copy of `model`, by path."""
    model = copy.deepcopy(model)
    calls: HookCalls = {name: [] for name, _ in model.named_modules()}
    handles = []
    for name, module in model.named_modules():
        def hook(_: nn.Module, grad_input: Any, grad_output: Any, name: str = name) -> None:
            calls[name].append((tuple(grad_input), tuple(grad_output)))

        register = module.register_full_backward_hook if full else module.register_backward_hook
        handles.append(register(hook))
    leaves = tuple(item.detach().clone().requires_grad_(item.requires_grad) for item in inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy hooks warn on every multi-op module
        model(*leaves).sum().backward()
    for handle in handles:
        handle.remove()
    return calls
