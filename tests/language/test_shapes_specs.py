"""The pure-Python shape rules against torch itself: torch is the oracle, never a hard-coded answer.

Part 1 drives each function of `gradexplain.language.shapes` (and the layer rules of the catalogue)
with generated shapes and arguments and runs the same operation on `torch.empty(shape)`: when torch
accepts, our rule must give exactly torch's shape; when torch raises, our rule must raise
ShapeProblem.

Part 2 generates whole specs as YAML text (inputs of random shapes, a chain of one to three steps,
layers with random arguments) and runs each step directly in torch as well. When the checker
accepts the spec, build + run_forward must succeed and every named value must have the shape the
checker recorded (and the shape the direct torch run gave); when the direct torch run raises, the
checker must have refused the spec with a SpecError.

Where the step language is deliberately stricter than torch (`.T` on more than two dimensions,
which torch only deprecates; more than one `...` in an index, whose torch meaning is a quirk), the
tests assert the refusal instead of comparing.
"""

from __future__ import annotations

import json
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch import nn

from gradexplain.capture.build import build
from gradexplain.errors import SpecError
from gradexplain.language import load_spec_text, shapes
from gradexplain.language.catalogue import LAYERS
from gradexplain.language.expr import Ellipsis_, IndexItem, NewAxis, Slice
from gradexplain.language.shapes import Shape, ShapeProblem, TensorType
from tests.helpers.capture import run_forward

# Exceptions by which torch (or Python, for slices) refuses an operation.
TORCH_ERRORS = (RuntimeError, IndexError, ValueError, TypeError)

FEW = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MORE = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

sizes = st.integers(0, 5)
shapes_st = st.lists(sizes, max_size=4).map(tuple)
dims = st.integers(-5, 5)


def dim_of(shape: Shape) -> st.SearchStrategy[int]:
    """A dimension index for `shape`: usually in range, sometimes anything from -5 to 5."""
    bound = max(len(shape), 1)
    return st.integers(-bound, bound - 1) | dims


@st.composite
def shape_and_dims(draw: st.DrawFn, count: int,
                   shape_strategy: st.SearchStrategy[Shape] = shapes_st) -> tuple[Shape, ...]:
    """A shape followed by `count` dimension indices for it."""
    shape = draw(shape_strategy)
    return (shape, *(draw(dim_of(shape)) for _ in range(count)))  # type: ignore[arg-type]


Outcome = Shape | tuple[Shape, ...] | None  # None: refused


def torch_outcome(run: Callable[[], Any]) -> Outcome:
    """The shape torch gives (a tuple of shapes for several tensors), or None if it raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = run()
        except TORCH_ERRORS:
            return None
    if isinstance(result, tuple | list):
        return tuple(tuple(item.shape) for item in result)
    return tuple(result.shape)


def our_outcome(run: Callable[[], Any]) -> Outcome:
    """The shape our rule gives, or None if it raises ShapeProblem (any other error propagates)."""
    try:
        result = run()
    except ShapeProblem:
        return None
    if isinstance(result, TensorType):
        return result.shape
    assert isinstance(result, tuple)
    return result


def same(ours: Outcome, theirs: Outcome, what: str) -> None:
    event("torch refuses" if theirs is None else "torch accepts")  # --hypothesis-show-statistics
    assert ours == theirs, f"{what}: ours {_say(ours)}, torch {_say(theirs)}"


def _say(outcome: Outcome) -> str:
    return "refuses" if outcome is None else f"gives {outcome}"


def empty(shape: Shape, floating: bool = True) -> torch.Tensor:
    return torch.empty(shape) if floating else torch.zeros(shape, dtype=torch.int64)


# --- part 1: the shape functions ------------------------------------------------------------


@st.composite
def related_shape(draw: st.DrawFn, base: Shape, max_rank: int = 4) -> Shape:
    """A shape aligned from the right with `base`: each size equal to base's, 1, or anything."""
    rank = draw(st.integers(0, max_rank))
    result: list[int] = []
    for i in range(1, rank + 1):
        choices = [st.just(1), sizes]
        if i <= len(base):
            choices.insert(0, st.just(base[-i]))
        result.append(draw(st.one_of(*choices)))
    return tuple(reversed(result))


@st.composite
def shape_pair(draw: st.DrawFn) -> tuple[Shape, Shape]:
    left = draw(shapes_st)
    return left, draw(related_shape(left))


@FEW
@given(shape_pair())
def test_broadcast_matches_torch(pair: tuple[Shape, Shape]) -> None:
    left, right = pair
    same(our_outcome(lambda: shapes.broadcast(left, right)),
         torch_outcome(lambda: empty(left) + empty(right)), f"broadcast {left} {right}")


@st.composite
def matmul_pair(draw: st.DrawFn) -> tuple[Shape, Shape]:
    left = draw(shapes_st)
    rank = draw(st.integers(0, 4))
    right = list(draw(st.lists(sizes, min_size=rank, max_size=rank)))
    if left and right and draw(st.booleans()):
        right[0 if rank == 1 else -2] = left[-1]  # make the inner sizes agree
    if rank > 2 and len(left) > 2 and draw(st.booleans()):
        left_batch, right_batch = left[:-2], rank - 2
        for i in range(1, min(len(left_batch), right_batch) + 1):
            right[-2 - i] = draw(st.sampled_from([left_batch[-i], 1]))
    return left, tuple(right)


@SOME
@given(matmul_pair())
def test_matmul_matches_torch(pair: tuple[Shape, Shape]) -> None:
    left, right = pair
    same(our_outcome(lambda: shapes.matmul(left, right)),
         torch_outcome(lambda: empty(left) @ empty(right)), f"matmul {left} {right}")


@FEW
@given(shape_and_dims(1), st.booleans(), st.booleans(),
       st.sampled_from([torch.sum, torch.mean]))
def test_reduce_matches_torch(case: tuple[Any, ...], all_dims: bool, keepdim: bool,
                              function: Callable[..., torch.Tensor]) -> None:
    shape, dim = case[0], None if all_dims else case[1]
    same(our_outcome(lambda: shapes.reduce(shape, dim, keepdim)),
         torch_outcome(lambda: function(empty(shape), dim=dim, keepdim=keepdim)),
         f"{function.__name__}{shape} dim={dim} keepdim={keepdim}")


@st.composite
def reshape_target(draw: st.DrawFn, shape: Shape) -> tuple[int, ...]:
    """Mostly targets with the right number of elements, so both outcomes are common."""
    kind = draw(st.sampled_from(["random", "permuted", "total", "ones"]))
    if kind == "random":
        return tuple(draw(st.lists(st.integers(-2, 6), max_size=4)))
    if kind == "total":
        return (draw(st.sampled_from([shapes.numel(shape), -1])),)
    target = list(draw(st.permutations(shape)))
    if kind == "ones":
        target.insert(draw(st.integers(0, len(target))), 1)
    for _ in range(draw(st.integers(0, 2))):  # replace one or two sizes with -1
        if target:
            target[draw(st.integers(0, len(target) - 1))] = -1
    return tuple(target)


@SOME
@given(st.data())
def test_reshape_matches_torch(data: st.DataObject) -> None:
    shape = data.draw(shapes_st)
    target = data.draw(reshape_target(shape))
    same(our_outcome(lambda: shapes.reshape(shape, target)),
         torch_outcome(lambda: torch.reshape(empty(shape), target)), f"reshape {shape} {target}")


@FEW
@given(shape_and_dims(2))
def test_flatten_matches_torch(case: tuple[Any, ...]) -> None:
    shape, start, end = case
    same(our_outcome(lambda: shapes.flatten(shape, start, end)),
         torch_outcome(lambda: torch.flatten(empty(shape), start, end)),
         f"flatten{shape} {start} {end}")


@FEW
@given(shape_and_dims(2))
def test_transpose_matches_torch(case: tuple[Any, ...]) -> None:
    shape, dim0, dim1 = case
    same(our_outcome(lambda: shapes.transpose(shape, dim0, dim1)),
         torch_outcome(lambda: torch.transpose(empty(shape), dim0, dim1)),
         f"transpose{shape} {dim0} {dim1}")


@FEW
@given(shape_and_dims(1, st.lists(st.sampled_from([0, 1, 1, 2, 3]), max_size=4).map(tuple)),
       st.booleans())
def test_squeeze_matches_torch(case: tuple[Any, ...], all_dims: bool) -> None:
    shape, dim = case[0], None if all_dims else case[1]
    tensor = empty(shape)
    same(our_outcome(lambda: shapes.squeeze(shape, dim)),
         torch_outcome(lambda: tensor.squeeze() if dim is None else tensor.squeeze(dim)),
         f"squeeze{shape} dim={dim}")


@FEW
@given(shapes_st, st.integers(-6, 6))
def test_unsqueeze_matches_torch(shape: Shape, dim: int) -> None:
    same(our_outcome(lambda: shapes.unsqueeze(shape, dim)),
         torch_outcome(lambda: torch.unsqueeze(empty(shape), dim)), f"unsqueeze{shape} {dim}")


@SOME
@given(shape_and_dims(1, st.lists(st.integers(0, 7), max_size=3).map(tuple)),
       st.integers(-1, 5))
def test_chunk_matches_torch(case: tuple[Any, ...], chunks: int) -> None:
    shape, dim = case
    same(our_outcome(lambda: shapes.chunk(shape, chunks, dim)),
         torch_outcome(lambda: torch.chunk(empty(shape), chunks, dim)),
         f"chunk{shape} chunks={chunks} dim={dim}")


def _bound() -> st.SearchStrategy[int | None]:
    return st.none() | st.integers(-7, 7)


index_items = st.one_of(
    st.integers(-6, 6),
    st.builds(Slice, _bound(), _bound(), st.none() | st.integers(-1, 3)),
    st.just(NewAxis()),
    st.just(Ellipsis_()),
)


def torch_item(item: IndexItem) -> Any:
    if isinstance(item, Slice):
        return slice(item.start, item.stop, item.step)
    if isinstance(item, NewAxis):
        return None
    if isinstance(item, Ellipsis_):
        return Ellipsis
    return item


@SOME
@given(shapes_st, st.lists(index_items, min_size=1, max_size=5).map(tuple))
def test_index_matches_torch(shape: Shape, items: tuple[IndexItem, ...]) -> None:
    ours = our_outcome(lambda: shapes.index(shape, items))
    if sum(isinstance(item, Ellipsis_) for item in items) > 1:
        # torch lets every `...` skip the same number of dimensions (x[..., 0, ...] is legal and
        # x[..., 0, ..., 1] reports a "dimension 3 with size 0"); the step language refuses it.
        assert ours is None, f"index {shape}{items}: more than one ... must be refused"
        return
    same(ours, torch_outcome(lambda: empty(shape)[tuple(torch_item(item) for item in items)]),
         f"index {shape}{items}")


# --- part 1: layer rules (window sizes, channel and feature checks, weight shapes) ------------


def pair_of(low: int, high: int) -> st.SearchStrategy[int | tuple[int, int]]:
    return st.integers(low, high) | st.tuples(st.integers(low, high), st.integers(low, high))


def check_layer(kind: str, kwargs: dict[str, Any], shape: Shape, floating: bool = True) -> None:
    """Our rule for the layer `kind` against `getattr(nn, kind)(**kwargs)` on an empty input."""
    rule = LAYERS[kind]
    options = {param.name: kwargs.get(param.name, param.default) for param in rule.params}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Initializing zero-element tensors is a no-op"
        try:
            module: nn.Module | None = getattr(nn, kind)(**kwargs)
        except TORCH_ERRORS:
            module = None
    what = f"{kind}({kwargs}) on {shape}{'' if floating else ' int64'}"
    if module is None:
        # The spec reader asks for the weight shapes of every layer, the checker then infers its
        # output: one of the two must refuse what torch's constructor refuses.
        same(our_outcome(lambda: (rule.weight_shapes(options),
                                  rule.infer(TensorType(shape, floating), options))[1]),
             None, what)
        return
    weights = {name: tuple(value.shape) for name, value in module.named_parameters()}
    assert rule.weight_shapes(options) == weights, f"{what}: weight shapes"
    ours = our_outcome(lambda: rule.infer(TensorType(shape, floating), options))
    if floating == (kind == "Embedding") and shapes.numel(shape) == 0:
        # The wrong dtype on an empty input: torch's shortcut for empty tensors sometimes skips
        # its dtype check (Conv2d on an int64 [0, 1, 1, 1]); the step language always refuses.
        assert ours is None, f"{what}: the wrong dtype must be refused"
        return
    same(ours, torch_outcome(lambda: module(empty(shape, floating))), what)


@st.composite
def spatial_shape(draw: st.DrawFn, channels: int) -> Shape:
    rank = draw(st.sampled_from([2, 3, 3, 3, 4, 4, 4, 5]))
    shape = list(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    if rank >= 3 and draw(st.integers(0, 5)):
        shape[-3] = channels
    if shape and not draw(st.integers(0, 3)):  # an empty batch, channel or image dimension
        shape[draw(st.integers(0, rank - 1))] = 0
    return tuple(shape)


@st.composite
def conv2d_case(draw: st.DrawFn) -> tuple[dict[str, Any], Shape]:
    kwargs: dict[str, Any] = {"in_channels": draw(st.integers(1, 4)),
                              "out_channels": draw(st.integers(1, 4)),
                              "kernel_size": draw(pair_of(1, 3))}
    optional = {"stride": pair_of(1, 3), "padding": pair_of(1, 2) | pair_of(0, 2),
                "dilation": pair_of(1, 2), "groups": st.sampled_from([1, 2, 3]),
                "bias": st.booleans()}
    for key, strategy in optional.items():
        if draw(st.booleans()):
            kwargs[key] = draw(strategy)
    return kwargs, draw(spatial_shape(kwargs["in_channels"]))


@MORE
@given(conv2d_case(), st.integers(0, 4))
def test_conv2d_rule_matches_torch(case: tuple[dict[str, Any], Shape], floating: int) -> None:
    check_layer("Conv2d", *case, floating=bool(floating))


@st.composite
def maxpool2d_case(draw: st.DrawFn) -> tuple[dict[str, Any], Shape]:
    kwargs: dict[str, Any] = {"kernel_size": draw(pair_of(1, 4))}
    optional = {"stride": pair_of(1, 3), "padding": pair_of(0, 1) | pair_of(0, 2),
                "dilation": pair_of(1, 2)}
    for key, strategy in optional.items():
        if draw(st.booleans()):
            kwargs[key] = draw(strategy)
    return kwargs, draw(spatial_shape(draw(st.integers(1, 3) | st.integers(0, 3))))


@MORE
@given(maxpool2d_case())
def test_maxpool2d_rule_matches_torch(case: tuple[dict[str, Any], Shape]) -> None:
    check_layer("MaxPool2d", *case)


def ending_in(base: Shape) -> st.SearchStrategy[Shape]:
    """Shapes that often end in `base` (what Linear and LayerNorm need), and sometimes do not."""
    prefixed = st.lists(sizes, max_size=2).map(lambda prefix: (*prefix, *base))
    return prefixed | related_shape(base)


@FEW
@given(st.integers(1, 4), st.integers(1, 4), st.booleans(), st.data())
def test_linear_rule_matches_torch(in_features: int, out_features: int, bias: bool,
                                   data: st.DataObject) -> None:
    shape = data.draw(ending_in((in_features,)))
    kwargs = {"in_features": in_features, "out_features": out_features, "bias": bias}
    check_layer("Linear", kwargs, shape, floating=bool(data.draw(st.integers(0, 4))))


@FEW
@given(st.one_of(st.integers(1, 3), st.lists(st.integers(1, 3), min_size=1, max_size=2)),
       st.booleans(), st.booleans(), st.data())
def test_layernorm_rule_matches_torch(normalized: int | list[int], affine: bool, bias: bool,
                                      data: st.DataObject) -> None:
    base = (normalized,) if isinstance(normalized, int) else tuple(normalized)
    shape = data.draw(ending_in(base))
    kwargs = {"normalized_shape": normalized if isinstance(normalized, int) else base,
              "elementwise_affine": affine, "bias": bias}
    check_layer("LayerNorm", kwargs, shape, floating=bool(data.draw(st.integers(0, 4))))


@FEW
@given(st.integers(1, 4), st.integers(1, 4), shapes_st, st.booleans())
def test_embedding_rule_matches_torch(count: int, size: int, shape: Shape,
                                      floating: bool) -> None:
    check_layer("Embedding", {"num_embeddings": count, "embedding_dim": size}, shape, floating)


@FEW
@given(st.sampled_from(["Flatten", "Softmax"]), shape_and_dims(2))
def test_dim_layers_match_torch(kind: str, case: tuple[Any, ...]) -> None:
    shape, first, second = case
    kwargs = {"start_dim": first, "end_dim": second} if kind == "Flatten" else {"dim": first}
    check_layer(kind, kwargs, shape)


# --- part 2: whole specs, checked, built and run ----------------------------------------------


@dataclass
class Draft:
    """A spec being generated, with the same forward run directly in torch alongside."""

    inputs: dict[str, str] = field(default_factory=dict)  # name -> YAML flow mapping
    layers: dict[str, str] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)  # the direct torch run's values
    stricter: bool = False  # the step language refuses this on purpose even if torch accepts

    def add_input(self, name: str, shape: Shape, floating: bool = True) -> str:
        init = (f"{{randn: {list(shape)}, requires_grad: true}}" if floating
                else f"{{zeros: {list(shape)}, dtype: int64}}")
        self.inputs[name] = init
        self.env[name] = (torch.randn(shape, requires_grad=True) if floating
                          else torch.zeros(shape, dtype=torch.int64))
        return name

    def yaml(self) -> str:
        lines = ["name: generated", "seed: 0", "inputs:"]
        lines += [f"  {name}: {init}" for name, init in self.inputs.items()]
        lines.append("  g: {value: 1.0, requires_grad: true}")
        if self.layers:
            lines.append("layers:")
            lines += [f"  {name}: {layer}" for name, layer in self.layers.items()]
        # A backward the checker accepts whatever the steps are: of a step on the spare input g
        # (a spec may not take the backward of a leaf).
        lines.append("forward: " + json.dumps([*self.steps, "g2 = g * 2"]))
        lines.append("backward: g2")
        return "\n".join(lines) + "\n"


Op = Callable[[st.DataObject, Draft, str, Shape], tuple[str, Callable[[], Any]]]


def _dim(data: st.DataObject, shape: Shape) -> int:
    return data.draw(dim_of(shape))


def op_binary(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    op = data.draw(st.sampled_from(["+", "-", "*", "/", "**", "@", "matmul"]))
    a_first = data.draw(st.booleans())
    if op in ("@", "matmul"):
        rank = data.draw(st.integers(0, 4))
        other = list(data.draw(st.lists(sizes, min_size=rank, max_size=rank)))
        if shape and other and data.draw(st.integers(0, 3)):  # usually make the inner sizes agree
            if a_first:
                other[0 if rank == 1 else -2] = shape[-1]
            else:
                other[-1] = shape[0 if len(shape) == 1 else -2]
        if rank > 2 and len(shape) > 2 and data.draw(st.booleans()):
            for i in range(1, min(len(shape), rank) - 1):
                other[-2 - i] = data.draw(st.sampled_from([shape[-2 - i], 1]))
        other_shape: Shape = tuple(other)
    else:
        other_shape = data.draw(related_shape(shape))
    other_name = draft.add_input(f"y{len(draft.inputs)}", other_shape)
    first, second = (a, other_name) if a_first else (other_name, a)
    x, y = draft.env[first], draft.env[second]
    if op == "matmul":
        return f"matmul({first}, {second})", lambda: torch.matmul(x, y)
    function = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
                "**": operator.pow, "@": operator.matmul}[op]
    return f"{first} {op} {second}", lambda: function(x, y)


def op_scalar(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x = draft.env[a]
    form = data.draw(st.sampled_from(["2 * {}", "{} - 1.5", "{} ** 2", "-{}", "{} / 4"]))
    run = {"2 * {}": lambda: 2 * x, "{} - 1.5": lambda: x - 1.5, "{} ** 2": lambda: x ** 2,
           "-{}": lambda: -x, "{} / 4": lambda: x / 4}[form]
    return form.format(a), run


def op_elementwise(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x = draft.env[a]
    name = data.draw(st.sampled_from(["sigmoid", "tanh", "relu", "exp", "abs", "square",
                                      "clone", "detach"]))
    return f"{name}({a})", lambda: getattr(torch, name)(x)


def op_reduce(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x = draft.env[a]
    name = data.draw(st.sampled_from(["sum", "mean"]))
    function = getattr(torch, name)
    # keepdim without dim is test_keepdim_without_dim below.
    form = data.draw(st.sampled_from(["all", "dim", "dim=", "keepdim"]))
    if form == "all":
        return f"{name}({a})", lambda: function(x)
    dim = _dim(data, shape)
    if form == "dim":
        return f"{name}({a}, {dim})", lambda: function(x, dim)
    if form == "dim=":
        return f"{name}({a}, dim={dim})", lambda: function(x, dim=dim)
    keep = data.draw(st.booleans())
    return f"{name}({a}, {dim}, keepdim={keep})", lambda: function(x, dim, keepdim=keep)


def op_softmax(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x, dim = draft.env[a], _dim(data, shape)
    name = data.draw(st.sampled_from(["softmax", "log_softmax"]))
    return f"{name}({a}, dim={dim})", lambda: getattr(torch, name)(x, dim=dim)


def op_reshape(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x, target = draft.env[a], data.draw(reshape_target(shape))
    return f"reshape({', '.join([a, *map(str, target)])})", lambda: torch.reshape(x, target)


def op_flatten(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x, start, end = draft.env[a], _dim(data, shape), _dim(data, shape)
    form = data.draw(st.sampled_from(["{}", "{}, {}", "{}, {}, {}", "{}, end_dim={}"]))
    if form == "{}":
        return f"flatten({a})", lambda: torch.flatten(x)
    if form == "{}, {}":
        return f"flatten({a}, {start})", lambda: torch.flatten(x, start)
    if form == "{}, {}, {}":
        return f"flatten({a}, {start}, {end})", lambda: torch.flatten(x, start, end)
    return f"flatten({a}, end_dim={end})", lambda: torch.flatten(x, end_dim=end)


def op_transpose(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x, dim0, dim1 = draft.env[a], _dim(data, shape), _dim(data, shape)
    return f"transpose({a}, {dim0}, {dim1})", lambda: torch.transpose(x, dim0, dim1)


def op_squeeze(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x = draft.env[a]
    if data.draw(st.booleans()):
        return f"squeeze({a})", lambda: torch.squeeze(x)
    dim = _dim(data, shape)
    if data.draw(st.booleans()):
        return f"squeeze({a}, {dim})", lambda: torch.squeeze(x, dim)
    dim = data.draw(st.integers(-len(shape) - 1, len(shape)) | st.integers(-6, 6))
    return f"unsqueeze({a}, {dim})", lambda: torch.unsqueeze(x, dim)


def op_transpose_attr(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x = draft.env[a]
    draft.stricter = draft.stricter or len(shape) > 2  # torch only deprecates x.T there
    return f"{a}.T", lambda: x.T


def op_index(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x = draft.env[a]
    items = data.draw(st.lists(index_items, min_size=1, max_size=4))
    if sum(isinstance(item, Ellipsis_) for item in items) > 1:
        draft.stricter = True  # see test_index_matches_torch

    def text(item: IndexItem) -> str:
        if isinstance(item, Slice):
            parts = ["" if part is None else str(part)
                     for part in (item.start, item.stop, item.step)]
            return ":".join(parts if item.step is not None else parts[:2])
        return {NewAxis: "None", Ellipsis_: "..."}.get(type(item), str(item))

    index = tuple(torch_item(item) for item in items)
    return f"{a}[{', '.join(text(item) for item in items)}]", lambda: x[index]


def op_layer(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x = draft.env[a]
    kind = data.draw(st.sampled_from(["Linear", "Linear", "Conv2d", "MaxPool2d", "LayerNorm",
                                      "Flatten", "Softmax", "ReLU", "Sigmoid", "Identity"]))
    kwargs: dict[str, Any]
    if kind == "Linear":
        last = shape[-1] if shape and shape[-1] > 0 else 2
        kwargs = {"in_features": data.draw(st.sampled_from([last, last, 3])),
                  "out_features": data.draw(st.integers(1, 3)), "bias": data.draw(st.booleans())}
    elif kind == "Conv2d":
        kwargs, _ = data.draw(conv2d_case())
        if len(shape) >= 3 and shape[-3] > 0 and data.draw(st.integers(0, 3)):
            kwargs["in_channels"] = shape[-3]
    elif kind == "MaxPool2d":
        kwargs, _ = data.draw(maxpool2d_case())
    elif kind == "LayerNorm":
        tail = tuple(size for size in shape[-2:] if size > 0) or (2,)
        normalized = data.draw(st.sampled_from([tail[-1], list(tail), 3]))
        kwargs = {"normalized_shape": normalized}
    elif kind == "Flatten":
        kwargs = {"start_dim": _dim(data, shape), "end_dim": _dim(data, shape)}
    elif kind == "Softmax":
        kwargs = {"dim": _dim(data, shape)}
    else:
        kwargs = {}
    name = f"lay{len(draft.layers)}"
    yaml_kwargs = {key: list(value) if isinstance(value, tuple) else value
                   for key, value in kwargs.items()}
    draft.layers[name] = json.dumps({kind: yaml_kwargs}) if yaml_kwargs else kind
    return f"{name}({a})", lambda: getattr(nn, kind)(**kwargs)(x)


def op_chunk(data: st.DataObject, draft: Draft, a: str, shape: Shape) -> tuple[str, Any]:
    x, chunks, dim = draft.env[a], data.draw(st.integers(1, 4)), _dim(data, shape)
    return f"chunk({a}, {chunks}, {dim})", lambda: torch.chunk(x, chunks, dim)


OPS: list[Op] = [op_binary, op_scalar, op_elementwise, op_reduce, op_softmax, op_reshape,
                 op_flatten, op_transpose, op_squeeze, op_transpose_attr, op_index, op_layer,
                 op_chunk]


def draw_spec(data: st.DataObject) -> tuple[Draft, bool]:
    """A spec of one to three steps; returns it and whether the direct torch run raised."""
    draft = Draft()
    if data.draw(st.integers(0, 9)) == 0:  # whole-number indices into an Embedding
        name = draft.add_input("x", data.draw(shapes_st), floating=False)
        count, size = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
        draft.layers["emb"] = json.dumps({"Embedding": {"num_embeddings": count,
                                                        "embedding_dim": size}})
        draft.steps.append("s0 = emb(x)")
        draft.env["s0"] = nn.Embedding(count, size)(draft.env[name])
        current = "s0"
    else:
        current = draft.add_input("x", data.draw(shapes_st))
    for _ in range(data.draw(st.integers(1, 3))):
        shape = tuple(draft.env[current].shape)
        op = data.draw(st.sampled_from(OPS))
        event(op.__name__)
        text, run = op(data, draft, current, shape)
        target = f"s{len(draft.steps)}"
        torch_failed = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                value = run()
            except TORCH_ERRORS:
                torch_failed = True
        if op is op_chunk and not torch_failed:
            count = data.draw(st.integers(1, 3)) if data.draw(st.booleans()) else len(value)
            targets = [f"{target}_{i}" for i in range(count)]
            draft.steps.append(f"{', '.join(targets)} = {text}")
            if count == 1:
                return draft, False  # a group of tensors under one name: the chain ends here
            if count != len(value):
                return draft, True  # Python cannot unpack them
            draft.env.update(zip(targets, value, strict=True))
            current = targets[0]
        else:
            draft.steps.append(f"{target} = {text}")
            if torch_failed:
                return draft, True
            draft.env[target] = value
            current = target
    return draft, False


def test_draft_yaml_loads_and_runs() -> None:
    """The generator's YAML is a spec the loader reads (guards the property test's plumbing)."""
    draft = Draft()
    draft.add_input("x", (2, 3))
    draft.layers["lay0"] = json.dumps({"Linear": {"in_features": 3, "out_features": 4}})
    draft.steps.append("s0 = lay0(x)")
    spec = load_spec_text(draft.yaml())
    _, values = run_forward(build(spec))
    assert spec.tensor("s0") is not None
    assert spec.tensor("s0").shape == tuple(values["s0"].shape) == (2, 4)  # type: ignore[union-attr]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_specs_agree_with_torch(data: st.DataObject) -> None:
    draft, torch_failed = draw_spec(data)
    text = draft.yaml()
    try:
        spec = load_spec_text(text)
    except SpecError as error:
        event("refused: torch fails too" if torch_failed else "refused: stricter on purpose")
        assert torch_failed or draft.stricter, (
            f"the checker refused a spec torch runs:\n{text}\n{error}")
        return
    event(f"accepted, {len(draft.steps)} step(s)")
    assert not torch_failed, f"the checker accepted a spec whose forward torch refuses:\n{text}"
    _, values = run_forward(build(spec))
    recorded = {info.name: info.shape for info in spec.tensors}
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            assert recorded.get(name) == tuple(value.shape), (
                f"{name}: checked {recorded.get(name)}, ran {tuple(value.shape)}\n{text}")
    for name, shape in recorded.items():
        assert name in values, f"{name} was checked but never computed\n{text}"
        if name in draft.env:  # the direct torch run agrees too
            assert tuple(draft.env[name].shape) == shape, f"{name}: direct torch run\n{text}"


@pytest.mark.parametrize("keep", [True, False])
def test_keepdim_without_dim(keep: bool) -> None:
    """Either the checker refuses `sum(x, keepdim=...)` or it runs with the checked shape."""
    draft = Draft()
    draft.add_input("x", (2, 3))
    draft.steps.append(f"s0 = sum(x, keepdim={keep})")
    try:
        spec = load_spec_text(draft.yaml())
    except SpecError:
        return
    _, values = run_forward(build(spec))
    assert tuple(values["s0"].shape) == spec.tensor("s0").shape  # type: ignore[union-attr]
