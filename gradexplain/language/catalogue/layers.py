"""The built-in `torch.nn` layers a spec may use: their arguments, weights and shape rules.

Argument names and defaults are torch's own (a test checks them against the installed torch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gradexplain.language import shapes
from gradexplain.language.catalogue.signature import Options, Param
from gradexplain.language.shapes import (
    ShapeProblem,
    TensorType,
    show,
)


@dataclass(frozen=True)


class LayerRule:
    name: str
    params: tuple[Param, ...]
    weight_shapes: Callable[[Options], dict[str, shapes.Shape]]
    infer: Callable[[TensorType, Options], TensorType]
    about: str
    accepts_whole: bool = False

    def options(self, given: Iterable[tuple[str, object]]) -> dict[str, object]:
        """Every argument of the layer: the ones given, torch's defaults for the rest."""
        values = dict(given)
        return {param.name: values.get(param.name, param.default) for param in self.params}


# --- layers ----------------------------------------------------------------------------------


def _pair(value: object) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    assert isinstance(value, tuple) and len(value) == 2
    return (int(value[0]), int(value[1]))


def _int(options: Options, key: str) -> int:
    value = options[key]
    assert isinstance(value, int)
    return value


def _floating_input(layer: str, x: TensorType) -> None:
    if not x.floating:
        raise ShapeProblem(f"{layer} needs a floating-point input, got whole-number indices")


def _no_weights(options: Options) -> dict[str, shapes.Shape]:
    return {}


def _activation(x: TensorType, options: Options) -> TensorType:
    return TensorType(x.shape, True, x.requires_grad)


def _linear_weights(options: Options) -> dict[str, shapes.Shape]:
    out_f, in_f = _int(options, "out_features"), _int(options, "in_features")
    result: dict[str, shapes.Shape] = {"weight": (out_f, in_f)}
    if options["bias"]:
        result["bias"] = (out_f,)
    return result


def _linear(x: TensorType, options: Options) -> TensorType:
    _floating_input("Linear", x)
    in_f = _int(options, "in_features")
    if not x.shape or x.shape[-1] != in_f:
        raise ShapeProblem(
            f"Linear(in_features={in_f}) needs an input whose last dimension is {in_f}, "
            f"got shape {show(x.shape)}"
        )
    return TensorType(x.shape[:-1] + (_int(options, "out_features"),), True, True)


def _conv2d_weights(options: Options) -> dict[str, shapes.Shape]:
    out_c, in_c, groups = (_int(options, "out_channels"), _int(options, "in_channels"),
                           _int(options, "groups"))
    for key, channels in (("in_channels", in_c), ("out_channels", out_c)):
        if channels % groups:
            raise ShapeProblem(f"Conv2d: {key}={channels} must be divisible by groups={groups}")
    kh, kw = _pair(options["kernel_size"])
    result: dict[str, shapes.Shape] = {"weight": (out_c, in_c // groups, kh, kw)}
    if options["bias"]:
        result["bias"] = (out_c,)
    return result


def _spatial(layer: str, x: TensorType, channels: int | None) -> None:
    if len(x.shape) not in (3, 4):
        raise ShapeProblem(
            f"{layer} needs an input of shape [N, C, H, W] or [C, H, W], got {show(x.shape)}"
        )
    if channels is not None and x.shape[-3] != channels:
        raise ShapeProblem(
            f"{layer}(in_channels={channels}) needs {channels} channels in dimension -3, "
            f"got shape {show(x.shape)}"
        )


def _conv2d(x: TensorType, options: Options) -> TensorType:
    _floating_input("Conv2d", x)
    _spatial("Conv2d", x, _int(options, "in_channels"))
    batch = x.shape[0] if len(x.shape) == 4 else 1
    if batch and 0 in x.shape[-2:]:
        raise ShapeProblem(
            f"Conv2d needs a non-empty image (only the batch may be empty), got {show(x.shape)}"
        )
    kernel, stride = _pair(options["kernel_size"]), _pair(options["stride"])
    padding, dilation = _pair(options["padding"]), _pair(options["dilation"])
    height, width = (
        shapes.window(x.shape[-2 + i], kernel[i], stride[i], padding[i], dilation[i], "Conv2d")
        for i in range(2)
    )
    return TensorType(x.shape[:-3] + (_int(options, "out_channels"), height, width), True, True)


def _maxpool2d(x: TensorType, options: Options) -> TensorType:
    _floating_input("MaxPool2d", x)
    _spatial("MaxPool2d", x, None)
    if 0 in x.shape[-3:]:
        raise ShapeProblem(
            f"MaxPool2d needs non-empty channels and image (only the batch may be empty), "
            f"got {show(x.shape)}"
        )
    kernel = _pair(options["kernel_size"])
    stride = kernel if options["stride"] is None else _pair(options["stride"])
    padding, dilation = _pair(options["padding"]), _pair(options["dilation"])
    for i in range(2):
        if padding[i] * 2 > kernel[i]:
            raise ShapeProblem(
                f"MaxPool2d: padding {padding[i]} must be at most half the kernel size {kernel[i]}"
            )
    height, width = (
        shapes.window(x.shape[-2 + i], kernel[i], stride[i], padding[i], dilation[i], "MaxPool2d")
        for i in range(2)
    )
    return TensorType(x.shape[:-2] + (height, width), True, x.requires_grad)


def _embedding_weights(options: Options) -> dict[str, shapes.Shape]:
    return {"weight": (_int(options, "num_embeddings"), _int(options, "embedding_dim"))}


def _embedding(x: TensorType, options: Options) -> TensorType:
    if x.floating:
        raise ShapeProblem(
            "Embedding looks rows up by whole-number indices; give its input `dtype: int64`"
        )
    return TensorType(x.shape + (_int(options, "embedding_dim"),), True, True)


def _normalized_shape(options: Options) -> shapes.Shape:
    value = options["normalized_shape"]
    if isinstance(value, int):
        return (value,)
    assert isinstance(value, tuple | list)
    return tuple(int(v) for v in value)


def _layernorm_weights(options: Options) -> dict[str, shapes.Shape]:
    if not options["elementwise_affine"]:
        return {}
    shape = _normalized_shape(options)
    return {"weight": shape, "bias": shape} if options["bias"] else {"weight": shape}


def _layernorm(x: TensorType, options: Options) -> TensorType:
    _floating_input("LayerNorm", x)
    shape = _normalized_shape(options)
    if x.shape[len(x.shape) - len(shape) :] != shape or len(x.shape) < len(shape):
        raise ShapeProblem(
            f"LayerNorm(normalized_shape={show(shape)}) needs an input ending in {show(shape)}, "
            f"got {show(x.shape)}"
        )
    affine = bool(options["elementwise_affine"])
    return TensorType(x.shape, True, x.requires_grad or affine)


def _flatten_layer(x: TensorType, options: Options) -> TensorType:
    start, end = _int(options, "start_dim"), _int(options, "end_dim")
    return x.with_shape(shapes.flatten(x.shape, start, end))


def _softmax_layer(x: TensorType, options: Options) -> TensorType:
    shapes.normalize_dim(_int(options, "dim"), len(x.shape))
    return _activation(x, options)


def _identity(x: TensorType, options: Options) -> TensorType:
    return x


_INPLACE = Param("inplace", "bool", False)

LAYERS: dict[str, LayerRule] = {
    rule.name: rule
    for rule in (
        LayerRule("Linear", (Param("in_features", "int"), Param("out_features", "int"),
                             Param("bias", "bool", True)),
                  _linear_weights, _linear, "y = x Wᵀ + b"),
        LayerRule("Conv2d", (Param("in_channels", "int"), Param("out_channels", "int"),
                             Param("kernel_size", "pair"), Param("stride", "pair", 1),
                             Param("padding", "pair", 0), Param("dilation", "pair", 1),
                             Param("groups", "int", 1), Param("bias", "bool", True)),
                  _conv2d_weights, _conv2d, "2-D convolution"),
        LayerRule("Embedding", (Param("num_embeddings", "int"), Param("embedding_dim", "int")),
                  _embedding_weights, _embedding, "row lookup: y[i] = W[index[i]]",
                  accepts_whole=True),
        LayerRule("ReLU", (_INPLACE,), _no_weights, _activation, "max(x, 0)"),
        LayerRule("LeakyReLU", (Param("negative_slope", "float", 0.01), _INPLACE),
                  _no_weights, _activation, "x if x > 0 else slope·x"),
        LayerRule("Sigmoid", (), _no_weights, _activation, "σ(x)"),
        LayerRule("Tanh", (), _no_weights, _activation, "tanh(x)"),
        LayerRule("GELU", (), _no_weights, _activation, "x·Φ(x)"),
        LayerRule("Softmax", (Param("dim", "int"),), _no_weights, _softmax_layer,
                  "softmax along dim"),
        LayerRule("Flatten", (Param("start_dim", "int", 1), Param("end_dim", "int", -1)),
                  _no_weights, _flatten_layer, "merge dimensions start_dim..end_dim",
                  accepts_whole=True),
        LayerRule("MaxPool2d", (Param("kernel_size", "pair"), Param("stride", "pair", None),
                                Param("padding", "pair", 0), Param("dilation", "pair", 1)),
                  _no_weights, _maxpool2d, "2-D max pooling"),
        LayerRule("LayerNorm", (Param("normalized_shape", "int_or_ints"),
                                Param("eps", "float", 1e-5),
                                Param("elementwise_affine", "bool", True),
                                Param("bias", "bool", True)),
                  _layernorm_weights, _layernorm, "normalise the trailing dimensions"),
        LayerRule("Identity", (), _no_weights, _identity, "returns its input", accepts_whole=True),
    )
}


# Params, layers and modules become attributes of an nn.Module, so they cannot take the name of one
# of nn.Module's own attributes (torch refuses `add_module("forward", ...)`). A test checks this
# list against the installed torch.
MODULE_ATTRIBUTES = frozenset({
    "T_destination",
    "add_module",
    "apply",
    "bfloat16",
    "buffers",
    "call_super_init",
    "children",
    "compile",
    "cpu",
    "cuda",
    "double",
    "dump_patches",
    "eval",
    "extra_repr",
    "float",
    "forward",
    "get_buffer",
    "get_extra_state",
    "get_parameter",
    "get_submodule",
    "half",
    "ipu",
    "load_state_dict",
    "modules",
    "mtia",
    "named_buffers",
    "named_children",
    "named_modules",
    "named_parameters",
    "parameters",
    "register_backward_hook",
    "register_buffer",
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_full_backward_pre_hook",
    "register_load_state_dict_post_hook",
    "register_load_state_dict_pre_hook",
    "register_module",
    "register_parameter",
    "register_state_dict_post_hook",
    "register_state_dict_pre_hook",
    "requires_grad_",
    "set_extra_state",
    "set_submodule",
    "share_memory",
    "state_dict",
    "to",
    "to_empty",
    "train",
    "training",
    "type",
    "xpu",
    "zero_grad",
})


