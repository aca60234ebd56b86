"""The oracle of the Python-model tests (tests/capture/test_pymodel_*.py): the same model and
inputs in plain PyTorch, and what gradexplain recorded, read back for comparison.

Each test rebuilds the model with the same factory under `torch.manual_seed(0)` and the same
inputs (`torch.manual_seed(0); torch.randn(...)`, one draw per input in order), runs it in plain
PyTorch with its own `register_backward_hook` / `register_full_backward_hook` hooks or a plain
`loss.backward()`, and compares what torch handed those hooks with what gradexplain recorded and
labelled. `explained` is explain() on the models of tests/helpers/pymodels.py that walk cleanly,
once per model and loss.
"""

from __future__ import annotations

import functools
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradexplain.api import Explanation, explain
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import LabelledArg, LabelledEvent, Walk
from tests.helpers import pymodels

Shape = tuple[int, ...]
Factory = Callable[[], nn.Module]

# --- oracle: the same model and inputs in plain PyTorch -----------------------------------------


@contextmanager
def seeded(seed: int = 0) -> Iterator[None]:
    """torch.manual_seed(seed) inside, the test process's own RNG restored after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def torch_model(make: Factory) -> nn.Module:
    """The model gradexplain loads: the factory called under torch.manual_seed(0)."""
    with seeded():
        return make()


def torch_inputs(*shapes: Shape) -> list[torch.Tensor]:
    """What `--input` makes: torch.manual_seed(0), then one torch.randn per input, in order."""
    with seeded():
        return [torch.randn(shape) for shape in shapes]


def leaves(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [tensor.detach().clone().requires_grad_() for tensor in tensors]


def loss_of(output: torch.Tensor | tuple[torch.Tensor, ...], loss: str) -> torch.Tensor:
    """`loss = output.sum()` (or `.mean()`); for a tuple, the sum of each part's."""
    parts = output if isinstance(output, tuple) else (output,)
    reduced = [part.sum() if loss == "sum" else part.mean() for part in parts]
    total = reduced[0]
    for part in reduced[1:]:
        total = total + part
    return total


@dataclass(frozen=True)
class PlainRun:
    """A hook-free forward and `loss.backward()`: the model with its `.grad`s, the inputs with
    theirs, and every module's output with its gradient (kept by retain_grad)."""

    model: nn.Module
    inputs: list[torch.Tensor]
    outputs: dict[str, torch.Tensor]

    def grads(self, input_names: Sequence[str]) -> dict[str, torch.Tensor]:
        found = {name: tensor.grad for name, tensor in zip(input_names, self.inputs, strict=True)}
        found.update({name: param.grad for name, param in self.model.named_parameters()})
        assert all(grad is not None for grad in found.values())
        return {name: grad for name, grad in found.items() if grad is not None}

    def output_grad(self, path: str) -> torch.Tensor:
        grad = self.outputs[path].grad
        assert grad is not None, path
        return grad


def plain_run(make: Factory, inputs: Sequence[torch.Tensor], loss: str = "sum") -> PlainRun:
    model = torch_model(make)
    tensors = leaves(inputs)
    outputs: dict[str, torch.Tensor] = {}

    def keep(path: str) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                output.retain_grad()
                outputs[path] = output
        return hook

    handles = [module.register_forward_hook(keep(path)) for path, module in model.named_modules()]
    loss_of(model(*tensors), loss).backward()
    for handle in handles:
        handle.remove()
    return PlainRun(model, tensors, outputs)


Grads = tuple[torch.Tensor | None, ...]


@dataclass(frozen=True)
class HookCall:
    """What one torch module backward hook received (pre hooks: grad_output only)."""

    grad_input: Grads
    grad_output: Grads


def _copied(grads: Grads) -> Grads:
    return tuple(None if grad is None else grad.detach().clone() for grad in grads)


def torch_hook_calls(make: Factory, inputs: Sequence[torch.Tensor], mode: str,
                     loss: str = "sum") -> dict[tuple[str, str], list[HookCall]]:
    """Register, in plain torch, the module backward hooks of one gradexplain pass on every
    module (legacy: register_backward_hook; full: register_full_backward_pre_hook and
    register_full_backward_hook), run forward and backward once, and return what each hook
    received, keyed by (hook kind as gradexplain names it, module path)."""
    return hook_calls(torch_model(make), leaves(inputs), mode,
                      lambda output: loss_of(output, loss))


def hook_calls(model: nn.Module, inputs: Sequence[torch.Tensor], mode: str,
               loss: Callable[[Any], torch.Tensor]) -> dict[tuple[str, str], list[HookCall]]:
    """`torch_hook_calls` on this model (hooked as it is: pass a copy) and these inputs (their
    requires_grad as they are), backward of `loss(model(*inputs))`."""
    calls: dict[tuple[str, str], list[HookCall]] = defaultdict(list)

    def backward(kind: str, path: str) -> Callable[[nn.Module, Grads, Grads], None]:
        def hook(module: nn.Module, grad_input: Grads, grad_output: Grads) -> None:
            calls[(kind, path)].append(HookCall(_copied(grad_input), _copied(grad_output)))
        return hook

    def pre(path: str) -> Callable[[nn.Module, Grads], None]:
        def hook(module: nn.Module, grad_output: Grads) -> None:
            calls[("full_backward_pre", path)].append(HookCall((), _copied(grad_output)))
        return hook

    for path, module in model.named_modules():
        if mode == "legacy":
            module.register_backward_hook(backward("backward", path))
        else:
            module.register_full_backward_pre_hook(pre(path))
            module.register_full_backward_hook(backward("full_backward", path))
    with warnings.catch_warnings():
        # "Using a non-full backward hook when the forward contains multiple autograd Nodes":
        # exactly the legacy behaviour under test.
        warnings.simplefilter("ignore")
        loss(model(*inputs)).backward()
    return dict(calls)


def assert_module_hooks_match(walk: Walk, mode: str,
                              expected: dict[tuple[str, str], list[HookCall]]) -> None:
    """Every module backward hook call gradexplain recorded in the `mode` pass holds what
    torch handed the same hook (`hook_calls`): the same calls, arguments and values, None
    where torch passes None."""
    kinds = ("backward",) if mode == "legacy" else ("full_backward_pre", "full_backward")
    got: dict[tuple[str, str], list[LabelledEvent]] = defaultdict(list)
    for kind in kinds:
        for item in events(walk, mode, kind):
            got[(kind, item.target)].append(item)
    assert sorted(got) == sorted(expected), mode
    for key, calls in expected.items():
        assert len(got[key]) == len(calls), key
        for item, call in zip(got[key], calls, strict=True):
            what = f"[{mode}] {key[0]} {key[1] or '<model>'}"
            if key[0] != "full_backward_pre":
                assert_args_equal(args_of(item, "grad_input"), call.grad_input, what)
            assert_args_equal(args_of(item, "grad_output"), call.grad_output, what)


# --- reading what gradexplain recorded ----------------------------------------------------------


def events(walk: Walk, mode: str, hook: str, target: str | None = None) -> list[LabelledEvent]:
    found = [item for item in walk.passes if item.mode == mode]
    assert len(found) == 1, f"no {mode} pass"
    return [event for event in found[0].events
            if event.hook == hook and (target is None or event.target == target)]


def event(walk: Walk, mode: str, hook: str, target: str) -> LabelledEvent:
    found = events(walk, mode, hook, target)
    assert len(found) == 1, f"[{mode}] {len(found)} {hook} events on {target!r}"
    return found[0]


def args_of(item: LabelledEvent, prefix: str) -> list[LabelledArg]:
    found = [arg for arg in item.args if arg.name.startswith(prefix + "[")]
    assert [arg.name for arg in found] == [f"{prefix}[{i}]" for i in range(len(found))]
    return found


def labels(args: Sequence[LabelledArg]) -> list[str | None]:
    return [None if arg.meaning is None else arg.meaning.text for arg in args]


def recorded(value: TensorValue | None) -> torch.Tensor:
    """A recorded value, in full (these small models are under the 1,000-value limit)."""
    assert value is not None and value.summary is None and value.value is not None, value
    return torch.tensor(value.value, dtype=torch.float64).reshape(value.shape)


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    want64 = want.detach().to(torch.float64)
    assert got.shape == want64.shape, f"{what}: shape {tuple(got.shape)}, torch {want64.shape}"
    assert torch.allclose(got, want64, rtol=1e-6, atol=1e-7), (
        f"{what}: recorded {got.tolist()}, torch says {want64.tolist()}")


def assert_args_equal(args: Sequence[LabelledArg], grads: Grads, what: str) -> None:
    """Recorded hook arguments equal what torch's own hook received, None for None."""
    assert len(args) == len(grads), f"{what}: {len(args)} arguments, torch gave {len(grads)}"
    for arg, grad in zip(args, grads, strict=True):
        if grad is None:
            assert arg.value is None and arg.meaning is None, f"{what} {arg.name}: torch: None"
        else:
            assert_close(recorded(arg.value), grad, f"{what} {arg.name}")


def input_names(walk: Walk) -> list[str]:
    """The inputs' names as the walk recorded them (the leaves that are not parameters)."""
    grads = walk.passes[0].grads
    return [grad.name for grad in grads if "." not in grad.name]


# --- the models that walk cleanly, explained ----------------------------------------------


GOOD_MODELS: dict[str, tuple[Factory, tuple[Shape, ...]]] = {
    "mlp": (pymodels.make_mlp, (pymodels.MLP_INPUT,)),
    "cnn": (pymodels.make_cnn, (pymodels.CNN_INPUT,)),
    "two_inputs": (pymodels.make_two_inputs, pymodels.TWO_INPUTS),
    "tuple_out": (pymodels.make_tuple_out, ((4, 3),)),
}


@functools.cache
def explained(name: str, loss: str = "sum") -> Explanation:
    """explain() on the model built as the CLI builds it, with the CLI's inputs (once per
    model and loss: an Explanation is immutable)."""
    make, shapes = GOOD_MODELS[name]
    return explain(torch_model(make), *leaves(torch_inputs(*shapes)), loss=loss)
