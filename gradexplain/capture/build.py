"""The builder: a checked ModelSpec becomes torch modules and input tensors, the same bit for bit.

`build(spec)` seeds its own forked RNG (the caller's global RNG is left as it was), creates the
inputs in spec order, then every module's params, layers and children in spec order. Two builds
of one spec, in one process or two, hold identical tensors: the trace relies on that to compare a
hooked run with a hook-free one.

`SpecModule` is the nn.Module a composite spec module becomes. Its forward interprets the parsed
steps: operators map to Python's tensor operators (so `p * x` records `MulBackward0` exactly as the
articles' code does), calls go to child modules or to `torch.<name>` for catalogue functions. While
`observe(callback)` is active, every named value is reported as it is computed.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradexplain.capture.usercode import caught, described, not_a_tensor_returned, with_place
from gradexplain.errors import ModelRunError, SpecRunError, first_line, quoted
from gradexplain.language.catalogue import FUNCTIONS, LAYERS, bind
from gradexplain.language.constants import fold
from gradexplain.language.expr import (
    BinOp,
    Call,
    Ellipsis_,
    Expr,
    Index,
    IndexItem,
    Name,
    Neg,
    NewAxis,
    Number,
    Slice,
    Transpose,
)
from gradexplain.language.model import (
    DType,
    LayerSpec,
    ModelSpec,
    ModuleSpec,
    PythonModel,
    Step,
    TensorInit,
)

Observer = Callable[[str, Any], None]
Builder = Callable[[], "Built"]  # a fresh, identical build each call (a Python model's maker)
# What a distributed walk does to each pass's build before tracing it (distributed/wrap.py).
Wrap = Callable[["Built"], "Built"]
_observer: ContextVar[Observer | None] = ContextVar("gradexplain_observer", default=None)

_DTYPES: dict[DType, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "int64": torch.int64,
}

_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "@": operator.matmul,
    "**": operator.pow,
}


@dataclass(frozen=True)
class Built:
    """A spec made real: the top-level module and the input tensors, in spec order. The module
    is a SpecModule for a YAML spec, the user's own module for a Python model."""

    spec: ModelSpec
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    # What the model is called through, when a distributed walk wraps it (DDP, FSDP2: see
    # distributed/wrap.py). The model's own modules and parameters keep every hook and name.
    wrapper: nn.Module | None = None

    def forward(self) -> dict[str, Any]:
        """Call the model on the inputs as its user would; what it returned, by name.

        A YAML spec names its results (`returns:`). A Python model's result is `output` (a
        tuple: `output0`, `output1`, ...; nested and dict parts: `output1_0`, `output_logits`),
        and the scalar backpropagated is `loss`, the sum or mean of the selected part (see
        `capture.outputs`), computed outside the model as a training loop would. Both names
        are reported to the observer like any step's.
        """
        python = self.spec.python
        called = self.model if self.wrapper is None else self.wrapper
        if python is None:
            output = called(*self.inputs)
            outputs = output if isinstance(output, tuple) else (output,)
            return dict(zip(self.spec.root.returns, outputs, strict=True))
        try:
            # Every build draws the same random numbers in its forward (dropout masks): the two
            # passes and the check run must compute the same thing.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.spec.seed)
                output = called(*self.inputs)
        except BaseException as error:  # the user's sys.exit() and BaseExceptions too
            # (torch refusing full hooks on an in-place change is the pipeline's to handle:
            # it leaves them off the modules concerned, see capture/inplace.py)
            if not caught(error):
                raise
            raise ModelRunError(_forward_failed(python.target, self.model, self.inputs,
                                                error)) from error
        return _python_results(output, python)

    def input(self, name: str) -> torch.Tensor:
        for spec, tensor in zip(self.spec.inputs, self.inputs, strict=True):
            if spec.name == name:
                return tensor
        raise KeyError(name)

    def leaves(self) -> dict[str, torch.Tensor]:
        """Every leaf tensor by canonical name: the inputs, then `model.named_parameters()`."""
        result = {spec.name: tensor for spec, tensor in zip(self.spec.inputs, self.inputs,
                                                            strict=True)}
        result.update(dict(self.model.named_parameters()))
        return result


_SHAPES_SHOWN = 4  # the most input shapes a failed forward's line names


def _forward_failed(target: str, model: nn.Module, inputs: tuple[torch.Tensor, ...],
                    error: BaseException) -> str:
    """One line for a Python model's failed forward: what its code did, on which inputs and
    where; a module that returned no tensor (which torch's legacy hooks fail on) said plainly."""
    returned = not_a_tensor_returned(error, model)
    if returned is not None:
        path, kind = returned
        if not path and kind == "None":
            return (f"{target}: its forward returned {kind}; gradexplain needs a tensor (or a "
                    "tuple/dict of tensors) to backpropagate from")
        if not path:
            # A dataclass or another object holding tensors: torch's legacy hooks, not
            # gradexplain, cannot find them (they take item [0] until a tensor comes).
            return (f"{target}: its forward returned {kind}, in which torch finds no tensor "
                    "for the legacy backward hook gradexplain puts on every module (torch "
                    "takes item [0] of a module's result until a tensor comes): return a "
                    "tensor, or a tuple, list or dict of tensors")
        return (f"{target}: the forward of {path} returned {kind}; gradexplain puts a legacy "
                "backward hook on every module, and torch needs a tensor (or a tuple/dict of "
                "tensors) in a module's result for it")
    # A forward given 20,000 inputs (`--inputs FILE.pt`) fails on their count: a few shapes
    # say which inputs it got, the count says the rest.
    shapes = ", ".join(str(tuple(tensor.shape)) for tensor in inputs[:_SHAPES_SHOWN])
    if len(inputs) > _SHAPES_SHOWN:
        shapes += f" and {len(inputs) - _SHAPES_SHOWN:,} more ({len(inputs):,} inputs)"
    verb, _, message = described(error).partition(": ")
    return with_place(f"{target}: its forward {verb} on inputs of shape {shapes}"
                      f"{': ' + message if message else ''}", error)


def build(spec: ModelSpec) -> Built:
    """Make the modules and inputs of `spec`, deterministically (see the module docstring)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        inputs = tuple(
            make_tensor(item.init).requires_grad_(item.requires_grad) for item in spec.inputs
        )
        model = SpecModule(spec.root, spec.dtype)
    return Built(spec, model, inputs)


def _python_results(output: Any, python: PythonModel) -> dict[str, Any]:
    """A Python model's results by name and `loss` (see `capture.outputs`), each reported to
    the observer like a step's."""
    from gradexplain.capture.outputs import python_results

    returned = python_results(output, python.output, python.loss, python.target)
    notify = _observer.get()
    if notify is not None:
        for name, value in returned.items():
            notify(name, value)
    return returned


def make_tensor(init: TensorInit) -> torch.Tensor:
    """A tensor from its TensorInit, drawing from the current (seeded) RNG where random."""
    dtype = _DTYPES[init.dtype]
    if init.kind == "value":
        return torch.tensor(init.value, dtype=dtype)
    if init.kind == "randn":
        return torch.randn(init.shape, dtype=dtype)
    if init.kind == "rand":
        return torch.rand(init.shape, dtype=dtype)
    if init.kind == "zeros":
        return torch.zeros(init.shape, dtype=dtype)
    return torch.ones(init.shape, dtype=dtype)


def make_layer(layer: LayerSpec, dtype: DType) -> nn.Module:
    """A torch.nn layer from the catalogue, with the spec's literal weights copied in."""
    rule = LAYERS[layer.kind]
    module: nn.Module = getattr(nn, rule.name)(**dict(layer.kwargs))
    module.to(_DTYPES[dtype])
    with torch.no_grad():
        for key, init in layer.weights:
            getattr(module, key).copy_(make_tensor(init))
    return module


@contextmanager
def observe(callback: Observer) -> Iterator[None]:
    """Within the block, every named value a forward computes is passed to `callback`."""
    token = _observer.set(callback)
    try:
        yield
    finally:
        _observer.reset(token)


class SpecModule(nn.Module):
    """A composite module of the spec; its forward runs the spec's steps."""

    def __init__(self, spec: ModuleSpec, dtype: DType) -> None:
        super().__init__()
        self._spec = spec
        for param in spec.params:
            self.register_parameter(param.name, nn.Parameter(make_tensor(param.init)))
        for layer in spec.layers:
            self.add_module(layer.name, make_layer(layer, dtype))
        for child in spec.modules:
            self.add_module(child.name, SpecModule(child, dtype))

    def extra_repr(self) -> str:
        return f"spec={self._spec.path or '<top level>'!r}"

    def forward(self, *args: Any) -> Any:
        spec = self._spec
        env: dict[str, Any] = dict(zip(spec.args, args, strict=True))
        env.update(self.named_parameters(recurse=False))
        env.update(self.named_children())
        notify = _observer.get()
        if notify is not None:
            for name in spec.args:
                notify(spec.qualify(name), env[name])
        for step in spec.steps:
            value = self._run_step(step, env)
            targets = step.targets
            values = (value,) if len(targets) == 1 else tuple(value)
            for name, item in zip(targets, values, strict=True):
                env[name] = item
                if notify is not None:
                    notify(spec.qualify(name), item)
        results = tuple(env[name] for name in spec.returns)
        return results[0] if len(results) == 1 else results

    def _run_step(self, step: Step, env: dict[str, Any]) -> Any:
        try:
            return evaluate(step.assignment.expr, env)
        except SpecRunError:
            raise
        except (RuntimeError, ValueError, TypeError, IndexError, ArithmeticError) as exc:
            raise SpecRunError(f"in step {quoted(step.text)}: {first_line(exc)}",
                               step.where) from exc


def evaluate(expr: Expr, env: dict[str, Any]) -> Any:
    """The value of a parsed expression; names come from `env` (already checked to exist)."""
    if isinstance(expr, Number):
        return expr.value
    if isinstance(expr, Name):
        return env[expr.id]
    if isinstance(expr, BinOp):
        left, right = evaluate(expr.left, env), evaluate(expr.right, env)
        if _is_number(left) and _is_number(right):
            # Two written numbers: the checker's own fold, so `1/0` or `10 ** 10 ** 8` can
            # neither hang here nor raise more than the ConstantProblem _run_step reports.
            return fold(expr.op, left, right)
        return _OPERATORS[expr.op](left, right)
    if isinstance(expr, Neg):
        return -evaluate(expr.operand, env)
    if isinstance(expr, Transpose):
        return evaluate(expr.operand, env).T
    if isinstance(expr, Index):
        return evaluate(expr.operand, env)[tuple(_index_item(item) for item in expr.items)]
    return _call(expr, env)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, torch.Tensor)


def _call(expr: Call, env: dict[str, Any]) -> Any:
    target = env.get(expr.func)
    if isinstance(target, nn.Module):
        return target(*(evaluate(arg, env) for arg in expr.args))
    rule = FUNCTIONS[expr.func]
    bound = bind(rule.name, rule.params, list(expr.args), list(expr.kwargs))
    tensors: list[Any] = []
    options: dict[str, Any] = {}
    for param in rule.params:
        value = bound[param.name]
        if param.kind == "tensor":
            tensors.append(evaluate(value, env))  # type: ignore[arg-type]
        elif param.kind == "ints":
            options[param.name] = tuple(evaluate(item, env) for item in value)  # type: ignore[attr-defined]
        elif isinstance(value, Number):
            options[param.name] = value.value
        # Parameters not written in the step are not passed: torch's own defaults apply, and the
        # call is the one the articles write (`sum(y)` records SumBackward0, as `y.sum()` does;
        # `sum(y, dim=None)` would record SumBackward1).
    return torch_function(rule.torch_path)(*tensors, **options)


def torch_function(path: str) -> Callable[..., Any]:
    """`torch.<path>` for a catalogue path like "sigmoid" or "nn.functional.leaky_relu"."""
    found: Any = torch
    for part in path.split("."):
        found = getattr(found, part)
    assert callable(found), path
    return found  # type: ignore[no-any-return]


def _index_item(item: IndexItem) -> Any:
    if isinstance(item, Slice):
        return slice(item.start, item.stop, item.step)
    if isinstance(item, NewAxis):
        return None
    if isinstance(item, Ellipsis_):
        return Ellipsis
    return item

