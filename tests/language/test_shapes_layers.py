"""The catalogue's layer rules against torch itself: torch is the oracle, never a hard-coded answer.

Window sizes, channel and feature checks and weight shapes: each layer rule of
`gradexplain.language.catalogue` gets generated arguments and input shapes, and
`getattr(nn, kind)(**kwargs)` runs on an empty input of that shape. When torch accepts, our rule
must give exactly torch's shape; when torch's constructor or forward raises, our rule must raise
ShapeProblem (tests/helpers/shapeoracle.py).
"""

from __future__ import annotations

import warnings
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from gradexplain.language import shapes
from gradexplain.language.catalogue import LAYERS
from gradexplain.language.shapes import Shape, TensorType
from tests.helpers.shapedraws import (
    FEW,
    MORE,
    conv2d_case,
    maxpool2d_case,
    related_shape,
    shape_and_dims,
    shapes_st,
    sizes,
)
from tests.helpers.shapeoracle import TORCH_ERRORS, empty, our_outcome, same, torch_outcome


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


@MORE
@given(conv2d_case(), st.integers(0, 4))
def test_conv2d_rule_matches_torch(case: tuple[dict[str, Any], Shape], floating: int) -> None:
    check_layer("Conv2d", *case, floating=bool(floating))


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

