"""The whitelist against the installed torch: every function and layer exists, every argument the
catalogue accepts is one torch accepts, with torch's default, and weight shapes are torch's."""

from __future__ import annotations

import inspect
from functools import reduce

import pytest
import torch
from torch import nn

from gradexplain.language.catalogue import FUNCTIONS, LAYERS, MODULE_ATTRIBUTES, REQUIRED


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_exists_in_torch(name: str) -> None:
    rule = FUNCTIONS[name]
    function = reduce(getattr, rule.torch_path.split("."), torch)
    assert callable(function)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_arguments_are_torchs(name: str) -> None:
    rule = LAYERS[name]
    cls = getattr(nn, name)
    assert isinstance(cls, type) and issubclass(cls, nn.Module)
    signature = inspect.signature(cls.__init__)
    for param in rule.params:
        assert param.name in signature.parameters, (name, param.name)
        torch_default = signature.parameters[param.name].default
        if param.default is REQUIRED:
            assert torch_default is inspect.Parameter.empty or name == "Softmax"
        else:
            assert torch_default == param.default, (name, param.name)


LAYER_EXAMPLES = [
    ("Linear", {"in_features": 3, "out_features": 2}),
    ("Linear", {"in_features": 3, "out_features": 2, "bias": False}),
    ("Conv2d", {"in_channels": 4, "out_channels": 6, "kernel_size": (3, 2), "groups": 2}),
    ("Conv2d", {"in_channels": 1, "out_channels": 2, "kernel_size": 3, "bias": False}),
    ("Embedding", {"num_embeddings": 7, "embedding_dim": 3}),
    ("LayerNorm", {"normalized_shape": (2, 3)}),
    ("LayerNorm", {"normalized_shape": 4, "bias": False}),
    ("LayerNorm", {"normalized_shape": 4, "elementwise_affine": False}),
    ("Sigmoid", {}),
]


@pytest.mark.parametrize(("name", "kwargs"), LAYER_EXAMPLES)
def test_weight_shapes_match_torch(name: str, kwargs: dict[str, object]) -> None:
    rule = LAYERS[name]
    options = {param.name: kwargs.get(param.name, param.default) for param in rule.params}
    layer = getattr(nn, name)(**kwargs)
    real = {key: tuple(value.shape) for key, value in layer.named_parameters()}
    assert rule.weight_shapes(options) == real


def test_module_attributes_cover_nn_module() -> None:
    public = {name for name in dir(nn.Module()) if not name.startswith("_")}
    assert public <= MODULE_ATTRIBUTES
