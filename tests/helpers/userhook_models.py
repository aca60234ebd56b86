"""Small Python models that come with hooks of their own (issue 17 item 8), for
tests/capture/test_user_hooks.py and the command line
(`walk tests/helpers/userhook_models.py:NAME`).

Every hook appends what it received to CALLS (copies, by its function's name), so a test can run
the model in plain PyTorch and compare what the hook got with what gradexplain recorded.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

CALLS: list[tuple[str, tuple[torch.Tensor | None, ...]]] = []


def _log(name: str, values: tuple[Any, ...]) -> None:
    CALLS.append((name, tuple(value.detach().clone() if isinstance(value, torch.Tensor)
                              else None for value in values)))


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def log_grads(module: nn.Module, grad_input: tuple[Any, ...],
              grad_output: tuple[Any, ...]) -> None:
    _log("log_grads", grad_input + grad_output)


def log_full(module: nn.Module, grad_input: tuple[Any, ...],
             grad_output: tuple[Any, ...]) -> None:
    _log("log_full", grad_input + grad_output)


def double_input_grad(module: nn.Module, grad_input: tuple[Any, ...],
                      grad_output: tuple[Any, ...]) -> tuple[Any, ...]:
    _log("double_input_grad", grad_input + grad_output)
    return tuple(None if grad is None else grad * 2 for grad in grad_input)


def triple_output(module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> Any:
    _log("triple_output", inputs + (output,))
    return output * 3


def double_grad(grad: torch.Tensor) -> torch.Tensor:
    _log("double_grad", (grad,))
    return grad * 2


def log_inputs(module: nn.Module, inputs: tuple[Any, ...]) -> None:
    _log("log_inputs", inputs)


def log_grad_output(module: nn.Module, grad_output: tuple[Any, ...]) -> None:
    _log("log_grad_output", grad_output)


def log_accumulated(tensor: torch.Tensor) -> None:
    _log("log_accumulated", (tensor.grad,))


def legacy_log() -> nn.Module:
    """A legacy backward hook on a submodule that only logs."""
    model = _mlp()
    model[2].register_backward_hook(log_grads)
    return model


def full_double() -> nn.Module:
    """A full backward hook on a submodule that returns its grad_input doubled."""
    model = _mlp()
    model[1].register_full_backward_hook(double_input_grad)
    return model


def forward_triple() -> nn.Module:
    """A forward hook that returns the submodule's output times 3: part of what it computes."""
    model = _mlp()
    model[1].register_forward_hook(triple_output)
    return model


def param_double() -> nn.Module:
    """A tensor hook on a parameter that doubles its gradient."""
    model = _mlp()
    first = model[0]
    assert isinstance(first, nn.Linear)
    first.weight.register_hook(double_grad)
    return model


def logging_only() -> nn.Module:
    """Hooks that only look: a forward pre-hook, a full backward pre-hook, a full backward hook
    and a post-accumulate-grad hook on a parameter."""
    model = _mlp()
    model[0].register_forward_pre_hook(log_inputs)
    model[2].register_full_backward_pre_hook(log_grad_output)
    model.register_full_backward_hook(log_full)
    last = model[2]
    assert isinstance(last, nn.Linear)
    last.bias.register_post_accumulate_grad_hook(log_accumulated)
    return model


def mixed() -> nn.Module:
    """A legacy hook on one module and a full hook on another: each runs in its own pass."""
    model = _mlp()
    model[0].register_backward_hook(log_grads)
    model[2].register_full_backward_hook(log_full)
    return model


def sticky() -> nn.Module:
    """A full hook registered and removed: torch's flag stays, refusing legacy hooks."""
    model = _mlp()
    model[1].register_full_backward_hook(log_full).remove()
    return model
