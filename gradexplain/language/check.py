"""The checker: do names resolve, do shapes fit, is everything within bounds? Without running torch.

It walks the forward as the builder will run it: the top-level steps in order, and each module's
steps at every call, with the argument types of that call. Every named tensor gets a TensorInfo
(shape, floating, requires_grad), which later stages use to size and name things.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from gradexplain.errors import (
    Location,
    SpecArithmeticError,
    SpecLimitError,
    SpecNameError,
    SpecShapeError,
    SpecValueError,
    quoted,
    show_number,
)
from gradexplain.language import constants, shapes
from gradexplain.language.catalogue import (
    FUNCTIONS,
    LAYERS,
    WHOLE_NUMBERS,
    BindProblem,
    bind,
    call_function,
)
from gradexplain.language.constants import ConstantProblem
from gradexplain.language.expr import (
    BinOp,
    Call,
    Expr,
    Index,
    Name,
    Neg,
    Number,
    Transpose,
)
from gradexplain.language.goals import check_goals
from gradexplain.language.model import LayerSpec, ModelSpec, ModuleSpec, Step, TensorInfo
from gradexplain.language.qualified import refuse_dotted_names
from gradexplain.language.schema import MAX_ELEMENTS, MAX_TOTAL_ELEMENTS
from gradexplain.language.scope import (
    Entry,
    Scope,
    a_kind,
    check_step_names,
    define,
    module_label,
    suggest,
)
from gradexplain.language.shapes import (
    NumberType,
    ShapeProblem,
    TensorType,
    TupleType,
    UnknownType,
    ValueType,
    show,
)
from gradexplain.language.work import (
    MultiplyAdds,
    bound_intermediate,
    bound_rank_values,
    check_work,
)


def check_spec(spec: ModelSpec) -> ModelSpec:
    """Check names, shapes and bounds; return the spec with `tensors` filled in."""
    checker = _Checker(spec)
    checker.run()
    # After the names are known to resolve, so name errors are said first.
    check_work(spec, checker.multiply_adds.forward, checker.total_elements)
    return replace(spec, tensors=tuple(checker.tensors.values()))


class _Checker:
    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.tensors: dict[str, TensorInfo] = {}
        self.total_elements = bound_rank_values(spec)
        self.multiply_adds = MultiplyAdds()
        self.module_paths: set[str] = set()
        self.checked_calls: dict[tuple[str, tuple[ValueType, ...]], ValueType] = {}
        for module in spec.root.all_modules():
            self.module_paths.add(module.path)
            for layer in module.layers:
                self.module_paths.add(module.qualify(layer.name))

    def run(self) -> None:
        spec = self.spec
        arg_types = tuple(
            TensorType(item.init.shape, item.init.dtype != "int64", item.requires_grad)
            for item in spec.inputs
        )
        input_places = {item.name: item.where for item in spec.inputs}
        self.module_body(spec.root, arg_types, input_places)
        for module in spec.root.all_modules():
            # Modules the forward never calls are still checked for names, with unknown types.
            if not any(key[0] == module.path for key in self.checked_calls):
                self.module_body(module, tuple(UnknownType() for _ in module.args), {})
        check_goals(spec, self.tensors, self.module_paths)

    # --- scopes and steps ------------------------------------------------------------------

    def scope_of(self, module: ModuleSpec, arg_types: tuple[ValueType, ...],
                 arg_places: dict[str, Location]) -> Scope:
        scope: Scope = {}
        arg_kind = "input" if module.path == "" else "argument"
        for name, value in zip(module.args, arg_types, strict=True):
            define(scope, name, Entry(arg_kind, arg_places.get(name, module.where), value))
        for param in module.params:
            define(scope, param.name, Entry("parameter", param.where,
                                            TensorType(param.init.shape, True, True)))
        for layer in module.layers:
            define(scope, layer.name, Entry("layer", layer.where, layer))
        for child in module.modules:
            define(scope, child.name, Entry("module", child.where, child))
        return scope

    def module_body(self, module: ModuleSpec, arg_types: tuple[ValueType, ...],
                    arg_places: dict[str, Location]) -> ValueType:
        key = (module.path, arg_types)
        if key in self.checked_calls:
            return self.checked_calls[key]
        scope = self.scope_of(module, arg_types, arg_places)
        self.multiply_adds.enter()
        for name, entry in scope.items():
            if isinstance(entry.value, TensorType):
                self.record(module.qualify(name), entry.value, entry.where)
            if isinstance(entry.value, LayerSpec):
                self.record_layer_weights(module, entry.value)
        for index, step in enumerate(module.steps):
            refuse_dotted_names(module, scope, index)
            check_step_names(module, scope, index)
            value = self.infer(step.assignment.expr, scope, step)
            self.assign(module, scope, step, value)
        results: list[ValueType] = []
        for name in module.returns:
            if name not in scope:
                raise SpecNameError(
                    f"returns names {name!r}, which is not defined in "
                    f"{module_label(module)}{suggest(name, scope)}",
                    module.where,
                )
            returned = scope[name].value
            if not isinstance(returned, TensorType | TupleType | UnknownType):
                what = ("a number" if isinstance(returned, NumberType)
                        else a_kind(scope[name].kind))
                raise SpecNameError(f"returns names {name!r}, {what}, not a tensor",
                                    module.where)
            results.append(returned)
        result: ValueType = results[0] if len(results) == 1 else TupleType(
            tuple(item for item in results if isinstance(item, TensorType))
        )
        if any(isinstance(item, UnknownType) for item in results):
            result = UnknownType()
        self.checked_calls[key] = result
        self.multiply_adds.leave(key, module is self.spec.root)
        return result

    def assign(self, module: ModuleSpec, scope: Scope, step: Step,
               value: ValueType) -> None:
        targets = step.targets
        if len(targets) == 1:
            values: tuple[ValueType, ...] = (value,)
        elif isinstance(value, TupleType):
            if len(value.items) != len(targets):
                raise SpecShapeError(
                    f"the step unpacks {len(targets)} names, but the right side gives "
                    f"{len(value.items)} tensors",
                    step.where,
                )
            values = value.items
        elif isinstance(value, UnknownType):
            values = tuple(UnknownType() for _ in targets)
        else:
            raise SpecShapeError(
                f"the step unpacks {len(targets)} names, but the right side is one value",
                step.where,
            )
        for name, column, item in zip(targets, step.assignment.target_columns, values,
                                      strict=True):
            where = step.where.shifted(column)
            define(scope, name, Entry("step", where, item))
            if isinstance(item, TensorType):
                self.record(module.qualify(name), item, where)

    # --- inference -------------------------------------------------------------------------

    def infer(self, expr: Expr, scope: Scope, step: Step) -> ValueType:
        try:
            value = self._infer(expr, scope, step)
        except ShapeProblem as problem:
            raise SpecShapeError(f"in step {quoted(step.text)}: {problem}",
                                 step.where.shifted(getattr(expr, "column", 0))) from None
        if expr is not step.assignment.expr and not isinstance(expr, Name | Number):
            self.intermediate(expr, value, scope, step)
        return value

    def intermediate(self, expr: Expr, value: ValueType, scope: Scope, step: Step) -> None:
        """A tensor made inside a step is bounded like a named one (work.py says how)."""
        items = value.items if isinstance(value, TupleType) else (value,)
        module_call = isinstance(expr, Call) and isinstance(
            getattr(scope.get(expr.func), "value", None), ModuleSpec)
        for item in items:
            if isinstance(item, TensorType):
                self.total_elements = bound_intermediate(expr, item.shape, module_call, step,
                                                         self.total_elements)

    def _infer(self, expr: Expr, scope: Scope, step: Step) -> ValueType:
        if isinstance(expr, Number):
            return NumberType(expr.value)
        if isinstance(expr, Name):
            entry = scope.get(expr.id)
            if entry is None:
                raise SpecNameError(f"{expr.id!r} is a function; call it: {expr.id}(...)",
                                    step.where.shifted(expr.column))
            if isinstance(entry.value, LayerSpec | ModuleSpec):
                raise SpecNameError(
                    f"{expr.id!r} is {a_kind(entry.kind)}; call it on a tensor: {expr.id}(x)",
                    step.where.shifted(expr.column),
                )
            return entry.value
        if isinstance(expr, BinOp):
            left = self.infer(expr.left, scope, step)
            right = self.infer(expr.right, scope, step)
            return self.binary(expr, left, right, step)
        if isinstance(expr, Neg):
            operand = self.infer(expr.operand, scope, step)
            if isinstance(operand, TensorType) and not operand.floating:
                raise ShapeProblem(f"unary minus needs a floating-point tensor; {WHOLE_NUMBERS}")
            if isinstance(operand, NumberType):
                return NumberType(-operand.value)  # a later fold needs the true value
            return operand
        if isinstance(expr, Transpose):
            operand = self.tensor_operand(self.infer(expr.operand, scope, step), ".T", step)
            if isinstance(operand, UnknownType):
                return operand
            if len(operand.shape) > 2:
                raise ShapeProblem(
                    f".T is for tensors of at most 2 dimensions, got {show(operand.shape)}; "
                    "use transpose(x, dim0, dim1)"
                )
            return operand.with_shape(tuple(reversed(operand.shape)))
        if isinstance(expr, Index):
            operand = self.tensor_operand(self.infer(expr.operand, scope, step), "indexing", step)
            if isinstance(operand, UnknownType):
                return operand
            return operand.with_shape(shapes.index(operand.shape, expr.items))
        return self.call(expr, scope, step)

    def tensor_operand(self, value: ValueType, what: str, step: Step) -> TensorType | UnknownType:
        if isinstance(value, TensorType | UnknownType):
            return value
        if isinstance(value, NumberType):
            raise ShapeProblem(f"{what} needs a tensor, got the number {value.value}")
        raise ShapeProblem(f"{what} needs one tensor, got {len(value.items)} "
                           "(unpack them first: `a, b = ...`)")

    def binary(self, expr: BinOp, left: ValueType, right: ValueType, step: Step) -> ValueType:
        if isinstance(left, UnknownType) or isinstance(right, UnknownType):
            return UnknownType()
        for side in (left, right):
            if isinstance(side, TupleType):
                raise ShapeProblem(f"{expr.op} needs single tensors, got a group of "
                                   f"{len(side.items)} (unpack them first: `a, b = ...`)")
        if isinstance(left, NumberType) and isinstance(right, NumberType):
            return self.fold(expr, left, right, step)
        tensors = [side for side in (left, right) if isinstance(side, TensorType)]
        if not all(tensor.floating for tensor in tensors):
            raise ShapeProblem(f"{expr.op} needs floating-point tensors; {WHOLE_NUMBERS}")
        if expr.op == "@":
            if not isinstance(left, TensorType) or not isinstance(right, TensorType):
                raise ShapeProblem("@ needs two tensors; use * to multiply by a number")
            product = TensorType(shapes.matmul(left.shape, right.shape), True,
                                 left.requires_grad or right.requires_grad)
            self.multiply_adds.add(shapes.numel(product.shape) * left.shape[-1], step,
                                   expr.column)
            return product
        if len(tensors) == 1:
            return TensorType(tensors[0].shape, True, tensors[0].requires_grad)
        a, b = tensors
        try:
            shape = shapes.broadcast(a.shape, b.shape)
        except ShapeProblem as problem:
            raise ShapeProblem(f"{expr.op} cannot combine them: {problem}") from None
        return TensorType(shape, a.floating or b.floating, a.requires_grad or b.requires_grad)

    def fold(self, expr: BinOp, left: NumberType, right: NumberType, step: Step) -> NumberType:
        """Arithmetic on two written numbers, done now as the run would do it, within the
        bounds of a literal: `1/0`, `(0 - 8) ** 0.5`, `10 ** 10 ** 8` are refused here."""
        try:
            return NumberType(constants.fold(expr.op, left.value, right.value))
        except ConstantProblem as problem:
            error = SpecLimitError if problem.too_large else SpecArithmeticError
            raise error(f"in step {quoted(step.text)}: {problem}",
                        step.where.shifted(expr.column)) from None

    def call(self, expr: Call, scope: Scope, step: Step) -> ValueType:
        where = step.where.shifted(expr.column)
        entry = scope.get(expr.func)
        if entry is not None:
            args = [self.infer(arg, scope, step) for arg in expr.args]
            if isinstance(entry.value, LayerSpec):
                if entry.value.kind == "Embedding":
                    self.embedding_indices(entry.value, expr, scope, where, step)
                return self.call_layer(entry.value, expr, args, where, step)
            if isinstance(entry.value, ModuleSpec):
                return self.call_module(entry.value, expr, args, where, step)
            raise SpecNameError(f"{expr.func!r} is {a_kind(entry.kind)} tensor, not something to "
                                "call", where)
        # A function's arguments are inferred once each, as bound below: inferring them here too
        # would double the work at every level of nesting (sigmoid(sigmoid(...)) 20 deep: 5 s).
        rule = FUNCTIONS[expr.func]
        options: dict[str, object] = {}
        tensor_args: list[ValueType] = []
        try:
            bound = bind(rule.name, rule.params, list(expr.args), list(expr.kwargs))
        except BindProblem as problem:
            raise SpecShapeError(f"in step {quoted(step.text)}: {problem}", where) from None
        for param in rule.params:
            value = bound[param.name]
            if param.kind == "tensor":
                assert isinstance(value, Name | Number | BinOp | Neg | Transpose | Index | Call)
                tensor_args.append(self.infer(value, scope, step))
            else:
                options[param.name] = self.literal_option(rule.name, param.name, param.kind,
                                                          value, where)
        result = call_function(rule, tensor_args, options)
        if rule.name == "matmul" and isinstance(result, TensorType) and isinstance(
                tensor_args[0], TensorType):
            self.multiply_adds.add(shapes.numel(result.shape) * tensor_args[0].shape[-1], step,
                                   expr.column)
        return result

    def literal_option(self, func: str, name: str, kind: str, value: object,
                       where: Location) -> object:
        """Non-tensor arguments (dim=1, keepdim=True) must be numbers written in the step."""
        if kind == "ints":
            assert isinstance(value, tuple)
            return tuple(self.literal_option(func, name, "int", item, where) for item in value)
        if not isinstance(value, Number):
            if value is None or isinstance(value, bool | int | float):
                return value  # a default
            raise SpecShapeError(f"{func}: {name} must be a number written in the step", where)
        number = value.value
        whole = isinstance(number, int) and not isinstance(number, bool)
        if kind in ("int", "int_or_none") and not whole:
            raise SpecShapeError(f"{func}: {name} must be a whole number, got {number}", where)
        if whole and not -2**63 <= number < 2**63:
            # torch takes its whole-number options as int64 and fails in its own words above.
            raise SpecShapeError(f"{func}: {name} must fit in int64 (below 2**63 in size), got "
                                 f"{show_number(number, exact_below=10**30)}", where)
        if kind == "bool" and not isinstance(number, bool):
            raise SpecShapeError(f"{func}: {name} must be True or False, got {number}", where)
        return number

    def embedding_indices(self, layer: LayerSpec, expr: Call, scope: Scope, where: Location,
                          step: Step) -> None:
        """Indices the spec writes out (an input given by value, or as zeros or ones, looked
        up as it is) must each be a row of the Embedding's weight, as torch will require."""
        if len(expr.args) != 1 or not isinstance(expr.args[0], Name):
            return
        entry = scope.get(expr.args[0].id)
        given = next((item for item in self.spec.inputs if item.name == expr.args[0].id), None)
        if entry is None or entry.kind != "input" or given is None:
            return
        init = given.init
        if init.kind == "value":
            indices = list(_flat(init.value))
        else:
            fill = {"zeros": 0, "ones": 1}.get(init.kind)
            indices = [] if fill is None or shapes.numel(init.shape) == 0 else [fill]
        rows = LAYERS["Embedding"].options(layer.kwargs)["num_embeddings"]
        assert isinstance(rows, int)  # the schema took it as one
        outside = next((index for index in indices if not 0 <= index < rows), None)
        if outside is not None:
            raise SpecValueError(
                f"in step {quoted(step.text)}: layer {layer.name!r}: Embedding(num_embeddings="
                f"{rows}) has rows 0 to {rows - 1}, and input {given.name!r} holds the index "
                f"{show_number(outside, exact_below=10**30)}", where)

    def call_layer(self, layer: LayerSpec, expr: Call, args: list[ValueType],
                   where: Location, step: Step) -> ValueType:
        if len(args) != 1 or expr.kwargs:
            raise SpecShapeError(f"the layer {layer.name!r} ({layer.kind}) takes one tensor",
                                 where)
        value = args[0]
        if isinstance(value, UnknownType):
            return value
        if not isinstance(value, TensorType):
            raise SpecShapeError(f"the layer {layer.name!r} ({layer.kind}) takes one tensor",
                                 where)
        rule = LAYERS[layer.kind]
        options = rule.options(layer.kwargs)
        try:
            if not value.floating and not rule.accepts_whole:
                raise ShapeProblem(f"{layer.kind} needs a floating-point input; {WHOLE_NUMBERS}")
            result = rule.infer(value, options)
        except ShapeProblem as problem:
            raise SpecShapeError(f"in step {quoted(step.text)}: layer {layer.name!r}: {problem}",
                                 where) from None
        if layer.kind in ("Linear", "Conv2d"):
            # Each output element is one weight row (one filter) times its input window.
            weight = rule.weight_shapes(options)["weight"]
            self.multiply_adds.add(
                shapes.numel(result.shape) * (shapes.numel(weight) // weight[0]), step,
                expr.column)
        return result

    def call_module(self, module: ModuleSpec, expr: Call, args: list[ValueType],
                    where: Location, step: Step) -> ValueType:
        if expr.kwargs:
            keywords = ", ".join(f"{name}=" for name, _ in expr.kwargs)
            raise SpecShapeError(
                f"the module {module.name!r} takes its arguments by position "
                f"({', '.join(module.args) or 'none'}), not by keyword ({keywords})", where)
        if len(args) != len(module.args):
            raise SpecShapeError(
                f"the module {module.name!r} takes {len(module.args)} argument(s) "
                f"({', '.join(module.args) or 'none'}), got {len(args)}",
                where,
            )
        for name, value in zip(module.args, args, strict=True):
            if isinstance(value, NumberType | TupleType):
                raise SpecShapeError(
                    f"the module {module.name!r} takes tensors; its argument {name!r} got "
                    f"{'a number' if isinstance(value, NumberType) else 'a group of tensors'}",
                    where,
                )
        key = (module.path, tuple(args))
        again = key in self.checked_calls
        try:
            result = self.module_body(module, tuple(args), {})
        except RecursionError:
            raise SpecLimitError("modules nest too deeply", where) from None
        if again:
            self.multiply_adds.called_again(key, step, expr.column)
        return result

    # --- records ---------------------------------------------------------------------------

    def record(self, name: str, value: TensorType, where: Location) -> None:
        count = shapes.numel(value.shape)
        if count > MAX_ELEMENTS:
            raise SpecLimitError(
                f"{name!r} would have shape {show(value.shape)}, {count:,} elements; the limit "
                f"is {MAX_ELEMENTS:,}",
                where,
            )
        if name in self.tensors:
            return
        self.total_elements += count
        if self.total_elements > MAX_TOTAL_ELEMENTS:
            raise SpecLimitError(
                f"with {name!r} ({show(value.shape)}), the spec's tensors hold "
                f"{self.total_elements:,} elements in all; the limit is {MAX_TOTAL_ELEMENTS:,} "
                "(hooks are explained on tiny models: make the tensors smaller)",
                where,
            )
        self.tensors[name] = TensorInfo(name, value.shape, value.floating, value.requires_grad)

    def record_layer_weights(self, module: ModuleSpec, layer: LayerSpec) -> None:
        rule = LAYERS[layer.kind]
        options = rule.options(layer.kwargs)
        for key, shape in rule.weight_shapes(options).items():
            self.record(module.qualify(f"{layer.name}.{key}"), TensorType(shape, True, True),
                        layer.where)

    # --- backward, grad, hooks -------------------------------------------------------------


def _flat(value: object) -> Iterator[float]:
    """The numbers of a literal, nested lists walked."""
    if isinstance(value, list):
        for item in value:
            yield from _flat(item)
    elif isinstance(value, int | float):
        yield value
