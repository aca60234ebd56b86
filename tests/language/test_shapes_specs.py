"""Whole generated specs against torch itself: torch is the oracle, never a hard-coded answer.

Specs are generated as YAML text (inputs of random shapes, a chain of one to three steps, layers
with random arguments) and each step runs directly in torch as well. When the checker accepts the
spec, build + run_forward must succeed and every named value must have the shape the checker
recorded (and the shape the direct torch run gave); when the direct torch run raises, the checker
must have refused the spec with a SpecError.

Where the step language is deliberately stricter than torch (`.T` on more than two dimensions,
which torch only deprecates; more than one `...` in an index, whose torch meaning is a quirk), the
tests assert the refusal instead of comparing. The shape functions and layer rules these steps
use are tested one by one in test_shapes_functions.py and test_shapes_layers.py.
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
from gradexplain.language import load_spec_text
from gradexplain.language.expr import Ellipsis_, IndexItem, NewAxis, Slice
from gradexplain.language.shapes import Shape
from tests.helpers.capture import run_forward
from tests.helpers.shapedraws import (
    conv2d_case,
    dim_of,
    index_items,
    maxpool2d_case,
    related_shape,
    reshape_target,
    shapes_st,
    sizes,
)
from tests.helpers.shapeoracle import TORCH_ERRORS, torch_item


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
