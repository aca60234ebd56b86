"""The spec's keys and value types: a parsed Document in, unchecked ModelSpec dataclasses out.

This stage knows which keys exist where and what type each value has. Whether names resolve and
shapes fit is the checker's job (check.py), which runs on the dataclasses this returns.
"""

from __future__ import annotations

import math

from gradexplain.errors import Location, SpecLimitError, SpecSchemaError, quoted, show_number
from gradexplain.language.catalogue import LAYERS, Param, did_you_mean
from gradexplain.language.cursor import Cursor, describe
from gradexplain.language.distributed import read_distributed
from gradexplain.language.expr import check_identifier, parse_step
from gradexplain.language.model import (
    INIT_KINDS,
    BackwardSpec,
    Capture,
    DType,
    GradCall,
    GradOutputs,
    InputSpec,
    Intervention,
    KwargValue,
    LayerSpec,
    Literal_,
    ModelSpec,
    ModuleSpec,
    ParamSpec,
    Shape,
    Step,
    TensorInit,
)
from gradexplain.language.shapes import ShapeProblem
from gradexplain.language.yamlio import Document

MAX_ELEMENTS = 10_000_000
# All the tensors the forward makes, together: each one a hook sees is copied and checked, so the
# time and memory of a walk grow with this sum (a forward of three [3000, 3000] steps, 27 million
# elements, took 16 s and 0.8 GB; 2,000 such steps would never finish).
MAX_TOTAL_ELEMENTS = 20_000_000
MAX_STEPS = 2_000
MAX_TIMES = 100
MAX_SIZE = 1_000_000  # one dimension, or one layer size argument

TOP_KEYS = ("name", "about", "seed", "dtype", "inputs", "params", "layers", "modules", "forward",
            "backward", "grad", "interventions", "captures", "distributed")
MODULE_KEYS = ("params", "layers", "modules", "forward")
DTYPES: tuple[DType, ...] = ("float32", "float64", "int64")
HOOKS = ("backward", "full_backward", "full_backward_pre", "tensor")
ACTIONS = ("normalize", "scale", "zero", "clip", "wrong_length", "wrong_shape")
MAX_RUNS = 100  # backward items plus grad calls
# Layer arguments that are sizes or counts: zero or negative values are never meaningful.
_POSITIVE = {"in_features", "out_features", "in_channels", "out_channels", "kernel_size",
             "stride", "dilation", "groups", "num_embeddings", "embedding_dim",
             "normalized_shape"}


def read_spec(doc: Document) -> ModelSpec:
    """Build the ModelSpec dataclasses from a Document, checking keys and value types."""
    top = Cursor(doc, (), doc.data).mapping(TOP_KEYS, required=("forward",))
    reader = _Reader(doc)
    if "dtype" in top:
        reader.dtype = reader.dtype_of(top["dtype"])
    name = top["name"].line("the name") if "name" in top else _stem(doc.file)
    about = top["about"].text() if "about" in top else ""
    seed = top["seed"].integer(0, 2**63 - 1) if "seed" in top else 0
    inputs = tuple(reader.input(key, cursor) for key, cursor in
                   (top["inputs"].entries("a mapping of input names") if "inputs" in top else []))
    root = reader.module("", "", top, tuple(spec.name for spec in inputs), doc.where(()),
                         top_level=True)
    backwards = reader.backwards(top["backward"]) if "backward" in top else ()
    grads = tuple(reader.grad_call(item) for item in
                  (top["grad"].items("a list of grad calls") if "grad" in top else []))
    interventions = tuple(
        reader.intervention(item) for item in
        (top["interventions"].items("a list of interventions") if "interventions" in top else [])
    )
    captures = tuple(
        reader.capture(key, cursor)
        for key, cursor in (top["captures"].entries("a mapping of capture names to module paths")
                            if "captures" in top else [])
    )
    distributed = (read_distributed(top["distributed"], inputs, reader)
                   if "distributed" in top else None)
    if not backwards and not grads:
        Cursor(doc, (), doc.data).fail(
            "nothing to differentiate: give `backward: <tensor>` or a `grad:` list"
        )
    if len(backwards) + len(grads) > MAX_RUNS:
        raise SpecLimitError(f"{len(backwards) + len(grads)} backward and grad calls; at most "
                             f"{MAX_RUNS} are allowed", doc.where(()))
    return ModelSpec(name, about, doc.file, seed, reader.dtype, inputs, root, backwards, grads,
                     interventions, captures, distributed=distributed)


def _stem(file: str) -> str:
    base = file.replace("\\", "/").rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[0] if "." in base else base


def _check_name(cursor: Cursor, name: str, what: str) -> str:
    check_identifier(name, cursor.where_key(), what)
    return name


class _Reader:
    """Reads the parts of a spec; holds the default dtype and counts steps against the bound."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.dtype: DType = "float32"
        self.steps = 0

    def dtype_of(self, cursor: Cursor) -> DType:
        return cursor.choice("a dtype name", "dtype", DTYPES)

    # --- tensors ---------------------------------------------------------------------------

    def input(self, name: str, cursor: Cursor) -> InputSpec:
        _check_name(cursor, name, "input")
        if not isinstance(cursor.value, dict):
            return InputSpec(name, self.literal(cursor, self.dtype), False, cursor.where_key())
        fields = cursor.mapping((*INIT_KINDS, "requires_grad", "dtype"),
                                what="a mapping like {value: 5.0, requires_grad: true}")
        dtype = self.dtype_of(fields["dtype"]) if "dtype" in fields else self.dtype
        init = self.init(cursor, fields, dtype)
        requires_grad = fields["requires_grad"].boolean() if "requires_grad" in fields else False
        if requires_grad and dtype == "int64":
            fields["requires_grad"].fail(
                "only floating-point tensors can require gradients; drop requires_grad or use "
                "a float dtype"
            )
        return InputSpec(name, init, requires_grad, cursor.where_key())

    def param(self, name: str, cursor: Cursor) -> ParamSpec:
        _check_name(cursor, name, "parameter")
        if not isinstance(cursor.value, dict):
            return ParamSpec(name, self.literal(cursor, self.dtype), cursor.where_key())
        fields = cursor.mapping(INIT_KINDS, what="a literal, or a mapping like {randn: [2, 3]}")
        return ParamSpec(name, self.init(cursor, fields, self.dtype), cursor.where_key())

    def init(self, cursor: Cursor, fields: dict[str, Cursor], dtype: DType) -> TensorInit:
        kinds = [key for key in INIT_KINDS if key in fields]
        if len(kinds) != 1:
            cursor.fail(
                "give exactly one of value, randn, rand, zeros, ones "
                f"(got {', '.join(kinds) if kinds else 'none'})"
            )
        kind = kinds[0]
        if kind == "value":
            return self.literal(fields["value"], dtype)
        shape = self.shape(fields[kind])
        if dtype == "int64" and kind in ("randn", "rand"):
            fields[kind].fail(f"{kind} draws real numbers; whole-number tensors take a `value`")
        return TensorInit(kind, shape, dtype, None, fields[kind].where())

    def shape(self, cursor: Cursor) -> Shape:
        if isinstance(cursor.value, int) and not isinstance(cursor.value, bool):
            dims = [cursor]
        else:
            dims = cursor.items("a shape: a list of whole numbers like [10, 2]")
        shape = tuple(dim.integer(0, MAX_SIZE) for dim in dims)
        _check_elements(cursor, shape)
        return shape

    def literal(self, cursor: Cursor, dtype: DType) -> TensorInit:
        shape = _literal_shape(cursor)
        _check_elements(cursor, shape)
        value = _literal_value(cursor, dtype)
        return TensorInit("value", shape, dtype, value, cursor.where())

    # --- modules ---------------------------------------------------------------------------

    def module(self, name: str, path: str, fields: dict[str, Cursor], args: tuple[str, ...],
               where: Location, top_level: bool = False) -> ModuleSpec:
        params = tuple(self.param(key, cursor) for key, cursor in
                       (fields["params"].entries("a mapping of parameter names")
                        if "params" in fields else []))
        layers = tuple(self.layer(key, cursor) for key, cursor in
                       (fields["layers"].entries("a mapping of layer names")
                        if "layers" in fields else []))
        modules: list[ModuleSpec] = []
        for key, cursor in (fields["modules"].entries("a mapping of module names")
                            if "modules" in fields else []):
            _check_name(cursor, key, "module")
            child_fields = cursor.mapping(MODULE_KEYS, required=("forward",),
                                          what="a module: a mapping with params, layers, "
                                               "modules and forward")
            forward = child_fields["forward"].mapping(
                ("args", "steps", "returns"), required=("steps",),
                what="a mapping like {args: [x], steps: ['y = p * x']}")
            child_args = tuple(
                _check_name(item, item.text("an argument name"), "argument")
                for item in (forward["args"].items("a list of argument names")
                             if "args" in forward else [])
            )
            child_path = f"{path}.{key}" if path else key
            modules.append(self.module(key, child_path, child_fields, child_args,
                                       cursor.where_key()))
        steps, returns = self.forward(fields["forward"], top_level)
        return ModuleSpec(name, path, args, params, layers, tuple(modules), steps, returns, where)

    def forward(self, cursor: Cursor, top_level: bool) -> tuple[tuple[Step, ...], tuple[str, ...]]:
        if top_level and isinstance(cursor.value, list):
            step_cursors, returns_cursor = cursor.items("a list of steps"), None
        else:
            allowed = ("steps", "returns") if top_level else ("args", "steps", "returns")
            fields = cursor.mapping(allowed, required=("steps",),
                                    what="a list of steps like ['y = module(x)']")
            step_cursors = fields["steps"].items("a list of steps like ['y = p * x']")
            returns_cursor = fields.get("returns")
        if not step_cursors:
            cursor.fail("a forward needs at least one step, `name = expression`")
        steps = tuple(self.step(item) for item in step_cursors)
        if returns_cursor is None:
            returns = steps[-1].targets
        elif isinstance(returns_cursor.value, list):
            returns = tuple(item.text("a name") for item in returns_cursor.items("names"))
            if not returns:
                returns_cursor.fail("returns needs at least one name")
        else:
            returns = (returns_cursor.text("a name or a list of names"),)
        return steps, returns

    def step(self, cursor: Cursor) -> Step:
        self.steps += 1
        if self.steps > MAX_STEPS:
            cursor.fail(f"a spec may have at most {MAX_STEPS:,} steps in all; a spec explains "
                        "hooks on a small model: keep the few steps that show them",
                        SpecLimitError)
        text = cursor.text("a step: text like 'y = p * x'")
        where = cursor.where().shifted(self.doc.text_offset(cursor.path))
        return Step(parse_step(text, where), where)

    def layer(self, name: str, cursor: Cursor) -> LayerSpec:
        _check_name(cursor, name, "layer")
        if isinstance(cursor.value, str):
            kind_cursor, options, weights = cursor, None, {}
            kind = cursor.value
        else:
            if not isinstance(cursor.value, dict):
                cursor.expected("a layer like {Linear: {in_features: 2, out_features: 1}}")
            kinds = [key for key in cursor.value if key not in ("weight", "bias")]
            if len(kinds) != 1:
                cursor.fail(
                    "a layer is one torch.nn class name with its arguments, plus optional "
                    "weight and bias, e.g. {Linear: {in_features: 2, out_features: 1}}"
                )
            kind = kinds[0]
            fields = cursor.mapping((kind, "weight", "bias"))
            kind_cursor, options = fields[kind], fields[kind]
            weights = {key: fields[key] for key in ("weight", "bias") if key in fields}
        rule = LAYERS.get(kind)
        if rule is None:
            where = kind_cursor.where_key() if options is not None else kind_cursor.where()
            raise SpecSchemaError(
                f"unknown layer {quoted(kind)}{did_you_mean(kind, list(LAYERS))} "
                f"(available: {', '.join(LAYERS)})",
                where,
            )
        kwargs = self.layer_kwargs(kind, rule.params, options, cursor)
        try:
            shapes = rule.weight_shapes(rule.options(kwargs))
        except ShapeProblem as problem:
            # Arguments that fit separately but not together (Conv2d channels and groups).
            (options or cursor).fail(str(problem))
        weight_inits: list[tuple[str, TensorInit]] = []
        for key, weight_cursor in weights.items():
            if key not in shapes:
                weight_cursor.fail(f"{kind} with these arguments has no {key}")
            init = self.literal(weight_cursor, self.dtype)
            if init.shape != shapes[key]:
                weight_cursor.fail(
                    f"{kind}.{key} has shape {list(shapes[key])}, but the literal has shape "
                    f"{list(init.shape)}",
                )
            weight_inits.append((key, init))
        return LayerSpec(name, kind, kwargs, tuple(weight_inits), cursor.where_key())

    def layer_kwargs(self, kind: str, params: tuple[Param, ...], options: Cursor | None,
                     layer: Cursor) -> tuple[tuple[str, KwargValue], ...]:
        """The layer's keyword arguments; `options` is None for the shorthand `act: Sigmoid`."""
        if options is None or options.value is None:
            given: dict[str, Cursor] = {}
        else:
            given = options.mapping([param.name for param in params],
                                    what=f"the keyword arguments of {kind}")
        result: list[tuple[str, KwargValue]] = []
        for param in params:
            if param.name in given:
                result.append((param.name, _kwarg(given[param.name], param)))
            elif param.required:
                (options or layer).fail(f"{kind} needs the argument {param.name!r}")
        return tuple(result)

    # --- backward, grad, interventions ------------------------------------------------------

    def backwards(self, cursor: Cursor) -> tuple[BackwardSpec, ...]:
        """`backward:` is one item (a name or a mapping) or a list of them, run in order."""
        if isinstance(cursor.value, list):
            items = cursor.items("a list of backward calls")
            if not items:
                cursor.fail("an empty backward list; give at least one tensor name")
            return tuple(self.backward(item) for item in items)
        return (self.backward(cursor),)

    def backward(self, cursor: Cursor) -> BackwardSpec:
        if isinstance(cursor.value, str):
            return BackwardSpec(cursor.value, None, False, 1, False, cursor.where())
        fields = cursor.mapping(("of", "gradient", "retain_graph", "times", "zero_grad_between",
                                 "zero_grad", "expect_error"),
                                required=("of",), what="a tensor name, or a mapping with `of:`")
        gradient = self.literal(fields["gradient"], self.dtype) if "gradient" in fields else None
        times = fields["times"].integer(1, MAX_TIMES) if "times" in fields else 1
        retain = fields["retain_graph"].boolean() if "retain_graph" in fields else False
        zero = fields["zero_grad_between"].boolean() if "zero_grad_between" in fields else False
        zero_before = fields["zero_grad"].boolean() if "zero_grad" in fields else False
        return BackwardSpec(fields["of"].text("a tensor name"), gradient, retain, times, zero,
                            cursor.where(), zero_before, _expect_error(fields))

    def grad_call(self, cursor: Cursor) -> GradCall:
        fields = cursor.mapping(("of", "wrt", "grad_outputs", "retain_graph", "expect_error"),
                                required=("of", "wrt"),
                                what="a mapping like {of: pred, wrt: x, grad_outputs: ones}")
        wrt_cursor = fields["wrt"]
        if isinstance(wrt_cursor.value, list):
            wrt = tuple(item.text("a tensor name") for item in wrt_cursor.items("names"))
            if not wrt:
                wrt_cursor.fail("wrt needs at least one tensor name")
        else:
            wrt = (wrt_cursor.text("a tensor name or a list of names"),)
        outputs = self.grad_outputs(fields["grad_outputs"]) if "grad_outputs" in fields else None
        retain = fields["retain_graph"].boolean() if "retain_graph" in fields else False
        return GradCall(fields["of"].text("a tensor name"), wrt, outputs, retain, cursor.where(),
                        _expect_error(fields))

    def grad_outputs(self, cursor: Cursor) -> GradOutputs:
        if cursor.value == "ones":
            return GradOutputs("ones")
        if isinstance(cursor.value, dict):
            fields = cursor.mapping(("one_hot",), required=("one_hot",),
                                    what="ones, {one_hot: column}, or a literal")
            return GradOutputs("one_hot", column=fields["one_hot"].integer(0, MAX_SIZE))
        if isinstance(cursor.value, str):
            cursor.fail(f"grad_outputs is `ones`, {{one_hot: column}} or a literal, got "
                        f"{describe(cursor.value)}")
        return GradOutputs("value", value=self.literal(cursor, self.dtype))

    def intervention(self, cursor: Cursor) -> Intervention:
        fields = cursor.mapping(("hook", "on", "action", "factor", "min", "max", "expect_error"),
                                required=("hook", "on", "action"),
                                what="a mapping like {hook: full_backward, on: model, "
                                     "action: normalize}")
        hook = fields["hook"].choice("a hook kind", "hook", HOOKS)
        action = fields["action"].choice("an action", "action", ACTIONS)
        factor = fields["factor"].number() if "factor" in fields else None
        low = fields["min"].number() if "min" in fields else None
        high = fields["max"].number() if "max" in fields else None
        if action == "scale" and factor is None:
            cursor.fail("the scale action needs `factor:`")
        if action != "scale" and factor is not None:
            fields["factor"].fail(f"`factor` belongs to the scale action, not {action}")
        if action == "clip" and low is None and high is None:
            cursor.fail("the clip action needs `min:`, `max:` or both")
        if action != "clip" and (low is not None or high is not None):
            cursor.fail(f"`min` and `max` belong to the clip action, not {action}")
        if low is not None and high is not None and low > high:
            cursor.fail(f"clip min {low} is above max {high}")
        return Intervention(hook, fields["on"].text("a module path or tensor name"),  # type: ignore[arg-type]
                            action, factor, low, high, cursor.where(),  # type: ignore[arg-type]
                            _expect_error(fields))

    def capture(self, name: str, cursor: Cursor) -> Capture:
        """`name: module.path`, or `name: {module: module.path, remove_after: 1}`."""
        _check_name(cursor, name, "capture")
        if not isinstance(cursor.value, dict):
            return Capture(name, cursor.text("a module path"), cursor.where())
        fields = cursor.mapping(("module", "remove_after"), required=("module",),
                                what="a module path, or {module: path, remove_after: calls}")
        remove_after = (fields["remove_after"].integer(0, MAX_TIMES) if "remove_after" in fields
                        else None)
        return Capture(name, fields["module"].text("a module path"), cursor.where(),
                       remove_after)


def _expect_error(fields: dict[str, Cursor]) -> str | None:
    """`expect_error:` part of the message torch is expected to raise (case does not matter)."""
    if "expect_error" not in fields:
        return None
    text = fields["expect_error"].text("part of the error message torch is expected to raise")
    if not text.strip():
        fields["expect_error"].fail("expect_error needs some of the expected message's words")
    return text.strip()


def _kwarg(cursor: Cursor, param: Param) -> KwargValue:
    positive = param.name in _POSITIVE
    low = 1 if positive else (0 if param.name == "padding" else None)
    if param.kind == "int":
        return cursor.integer(low, MAX_SIZE)
    if param.kind == "bool":
        return cursor.boolean()
    if param.kind == "float":
        return cursor.number()
    if param.kind == "int_or_none":
        return None if cursor.value is None else cursor.integer(low, MAX_SIZE)
    if param.kind in ("pair", "int_or_ints"):
        if param.kind == "pair" and cursor.value is None and param.default is None:
            return None
        if isinstance(cursor.value, list):
            items = cursor.items("whole numbers")
            if param.kind == "pair" and len(items) != 2:
                cursor.fail(f"{param.name} is one whole number or a pair [h, w]")
            if not items:
                cursor.fail(f"{param.name} needs at least one size")
            return tuple(item.integer(low, MAX_SIZE) for item in items)
        return cursor.integer(low, MAX_SIZE)
    raise AssertionError(param.kind)


def _check_elements(cursor: Cursor, shape: Shape) -> None:
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        cursor.fail(
            f"a tensor of shape {list(shape)} has {count:,} elements; the limit is "
            f"{MAX_ELEMENTS:,} (this tool explains small models)",
            SpecLimitError,
        )


def _literal_shape(cursor: Cursor) -> Shape:
    """The shape of a nested-list literal, which must be rectangular."""
    value = cursor.value
    if isinstance(value, list):
        if not value:
            return (0,)
        items = cursor.items("a list")
        inner = [_literal_shape(item) for item in items]
        for item, shape in zip(items, inner, strict=True):
            if shape != inner[0]:
                item.fail(
                    f"rows of a tensor literal must all have the same shape: this one is "
                    f"{list(shape)}, the first is {list(inner[0])}"
                )
        return (len(items), *inner[0])
    cursor.number()
    return ()


def _literal_value(cursor: Cursor, dtype: DType) -> Literal_:
    if isinstance(cursor.value, list):
        return [_literal_value(item, dtype) for item in cursor.items("a list")]
    written = cursor.value
    if dtype == "int64" and isinstance(written, int) and not isinstance(written, bool):
        # Taken as written: a float cannot hold every int64 (2**63 - 1 rounds up to 2**63).
        return _int64(cursor, written)
    number = cursor.number()
    if dtype == "int64":
        if not float(number).is_integer():
            cursor.fail(f"an int64 tensor holds whole numbers, got {number}")
        return _int64(cursor, int(number))
    return number


def _int64(cursor: Cursor, number: int) -> int:
    if not -(2**63) <= number < 2**63:
        cursor.fail("an int64 tensor holds whole numbers below 2**63 in size, got "
                    f"{show_number(number, exact_below=10**30)}")
    return number
