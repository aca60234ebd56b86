"""The functions a step may call: `sigmoid(x)`, `sum(x, dim=1)`, `chunk(x, 2)`, ...

Each rule names the torch function it calls (`torch.<torch_path>`), its parameters, and how the
result's shape follows from the arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gradexplain.language import shapes
from gradexplain.language.catalogue.signature import WHOLE_NUMBERS, Options, Param
from gradexplain.language.shapes import (
    NumberType,
    ShapeProblem,
    TensorType,
    TupleType,
    UnknownType,
    ValueType,
)


@dataclass(frozen=True)


class FunctionRule:
    name: str
    torch_path: str
    params: tuple[Param, ...]
    infer: Callable[[Sequence[TensorType], Options], ValueType]
    about: str
    # Whole-number (int64) tensors are Embedding indices; only functions that move elements
    # around without arithmetic accept them.
    accepts_whole: bool = False


# --- functions -------------------------------------------------------------------------------


def _same(tensors: Sequence[TensorType], options: Options) -> ValueType:
    return tensors[0]


def _floating(tensors: Sequence[TensorType], options: Options) -> ValueType:
    return TensorType(tensors[0].shape, True, tensors[0].requires_grad)


def _detached(tensors: Sequence[TensorType], options: Options) -> ValueType:
    return TensorType(tensors[0].shape, tensors[0].floating, False)


def _reduction(tensors: Sequence[TensorType], options: Options) -> ValueType:
    dim = options["dim"]
    assert dim is None or isinstance(dim, int)
    return tensors[0].with_shape(shapes.reduce(tensors[0].shape, dim, bool(options["keepdim"])))


def _along_dim(tensors: Sequence[TensorType], options: Options) -> ValueType:
    dim = options["dim"]
    assert isinstance(dim, int)
    shapes.normalize_dim(dim, len(tensors[0].shape))
    return tensors[0]


def _matmul(tensors: Sequence[TensorType], options: Options) -> ValueType:
    left, right = tensors
    return TensorType(shapes.matmul(left.shape, right.shape), True,
                      left.requires_grad or right.requires_grad)


def _reshape(tensors: Sequence[TensorType], options: Options) -> ValueType:
    target = options["shape"]
    assert isinstance(target, tuple)
    return tensors[0].with_shape(shapes.reshape(tensors[0].shape, target))


def _flatten(tensors: Sequence[TensorType], options: Options) -> ValueType:
    start, end = options["start_dim"], options["end_dim"]
    assert isinstance(start, int) and isinstance(end, int)
    return tensors[0].with_shape(shapes.flatten(tensors[0].shape, start, end))


def _transpose(tensors: Sequence[TensorType], options: Options) -> ValueType:
    dim0, dim1 = options["dim0"], options["dim1"]
    assert isinstance(dim0, int) and isinstance(dim1, int)
    return tensors[0].with_shape(shapes.transpose(tensors[0].shape, dim0, dim1))


def _squeeze(tensors: Sequence[TensorType], options: Options) -> ValueType:
    dim = options["dim"]
    assert dim is None or isinstance(dim, int)
    return tensors[0].with_shape(shapes.squeeze(tensors[0].shape, dim))


def _unsqueeze(tensors: Sequence[TensorType], options: Options) -> ValueType:
    dim = options["dim"]
    assert isinstance(dim, int)
    return tensors[0].with_shape(shapes.unsqueeze(tensors[0].shape, dim))


def _chunk(tensors: Sequence[TensorType], options: Options) -> ValueType:
    chunks, dim = options["chunks"], options["dim"]
    assert isinstance(chunks, int) and isinstance(dim, int)
    pieces = shapes.chunk(tensors[0].shape, chunks, dim)
    return TupleType(tuple(tensors[0].with_shape(piece) for piece in pieces))


_X = Param("input", "tensor")
_DIM_OPT = Param("dim", "int_or_none", None)
_KEEPDIM = Param("keepdim", "bool", False, requires="dim")


def _elementwise(name: str, about: str, torch_path: str | None = None) -> FunctionRule:
    return FunctionRule(name, torch_path or name, (_X,), _floating, about)


FUNCTIONS: dict[str, FunctionRule] = {
    rule.name: rule
    for rule in (
        _elementwise("sigmoid", "σ(x) = 1 / (1 + e^-x), element-wise"),
        _elementwise("tanh", "tanh(x), element-wise"),
        _elementwise("relu", "max(x, 0), element-wise"),
        _elementwise("exp", "e^x, element-wise"),
        _elementwise("log", "natural logarithm, element-wise"),
        _elementwise("sin", "sin(x), element-wise"),
        _elementwise("cos", "cos(x), element-wise"),
        _elementwise("sqrt", "√x, element-wise"),
        _elementwise("abs", "|x|, element-wise"),
        _elementwise("square", "x², element-wise"),
        FunctionRule("leaky_relu", "nn.functional.leaky_relu",
                     (_X, Param("negative_slope", "float", 0.01)), _floating,
                     "x if x > 0 else slope·x"),
        FunctionRule("clone", "clone", (_X,), _same, "a copy that stays in the graph",
                     accepts_whole=True),
        FunctionRule("detach", "detach", (_X,), _detached, "the same values, cut from the graph",
                     accepts_whole=True),
        FunctionRule("sum", "sum", (_X, _DIM_OPT, _KEEPDIM), _reduction,
                     "sum of all elements, or along dim"),
        FunctionRule("mean", "mean", (_X, _DIM_OPT, _KEEPDIM), _reduction,
                     "mean of all elements, or along dim"),
        FunctionRule("softmax", "softmax", (_X, Param("dim", "int")), _along_dim,
                     "softmax along dim"),
        FunctionRule("log_softmax", "log_softmax", (_X, Param("dim", "int")), _along_dim,
                     "log of softmax along dim"),
        FunctionRule("matmul", "matmul", (_X, Param("other", "tensor")), _matmul,
                     "matrix product, the same as @"),
        FunctionRule("reshape", "reshape", (_X, Param("shape", "ints")), _reshape,
                     "reshape(x, 2, -1): the same elements in a new shape", accepts_whole=True),
        FunctionRule("flatten", "flatten",
                     (_X, Param("start_dim", "int", 0), Param("end_dim", "int", -1)), _flatten,
                     "merge dimensions start_dim..end_dim into one", accepts_whole=True),
        FunctionRule("transpose", "transpose", (_X, Param("dim0", "int"), Param("dim1", "int")),
                     _transpose, "swap two dimensions", accepts_whole=True),
        FunctionRule("squeeze", "squeeze", (_X, _DIM_OPT), _squeeze,
                     "drop dimensions of size 1", accepts_whole=True),
        FunctionRule("unsqueeze", "unsqueeze", (_X, Param("dim", "int")), _unsqueeze,
                     "add a dimension of size 1", accepts_whole=True),
        FunctionRule("chunk", "chunk", (_X, Param("chunks", "int"), Param("dim", "int", 0)),
                     _chunk, "split into pieces along dim: `a, b = chunk(x, 2)`",
                     accepts_whole=True),
    )
}


def call_function(rule: FunctionRule, args: Sequence[ValueType], options: Options) -> ValueType:
    """The type a function call returns, given the types of its tensor arguments."""
    tensors: list[TensorType] = []
    for arg in args:
        if isinstance(arg, UnknownType):
            return UnknownType()
        if not isinstance(arg, TensorType):
            got = f"the number {arg.value}" if isinstance(arg, NumberType) else "several tensors"
            raise ShapeProblem(f"{rule.name} needs a tensor, got {got}")
        tensors.append(arg)
    if not rule.accepts_whole and not all(tensor.floating for tensor in tensors):
        raise ShapeProblem(f"{rule.name} needs floating-point tensors; {WHOLE_NUMBERS}")
    return rule.infer(tensors, options)
