"""What the spec asks of its forward: backward, autograd.grad calls, interventions and captures.

These checks run after the forward has been checked, on the TensorInfo of every named tensor:
each target must exist, require grad where a gradient is asked of it, and fit in shape.
"""

from __future__ import annotations

from gradexplain.errors import Location, SpecNameError, SpecSchemaError, SpecShapeError
from gradexplain.language import shapes
from gradexplain.language.expr import Name
from gradexplain.language.model import ModelSpec, TensorInfo, TensorInit
from gradexplain.language.scope import check_not_builtin, suggest
from gradexplain.language.shapes import show

Tensors = dict[str, TensorInfo]


def check_goals(spec: ModelSpec, tensors: Tensors, module_paths: set[str]) -> None:
    """Check `backward`, `grad`, `interventions` and `captures` against the checked forward."""
    leaves = _leaves(spec, tensors)
    _check_backward(spec, tensors, leaves)
    _check_grads(spec, tensors, leaves)
    _check_hooks(spec, tensors, module_paths)


def _leaves(spec: ModelSpec, tensors: Tensors) -> set[str]:
    """The tensors no step computes: inputs, parameters, layer weights, and top-level steps
    that only rename one of them (`y = x`)."""
    leaves = {item.name for item in spec.inputs}
    for module in spec.root.all_modules():
        leaves |= {module.qualify(param.name) for param in module.params}
        for layer in module.layers:
            prefix = module.qualify(layer.name) + "."
            leaves |= {name for name in tensors if name.startswith(prefix)}
    for step in spec.root.steps:
        expr = step.assignment.expr
        if isinstance(expr, Name) and expr.id in leaves and len(step.targets) == 1:
            leaves.add(step.targets[0])
    return leaves


def _not_a_leaf(name: str, leaves: set[str], where: Location, role: str) -> None:
    if name in leaves:
        raise SpecNameError(
            f"{role} names {name!r}, a leaf tensor (an input or a parameter): no step computes "
            "it, so there is no graph for hooks to fire on; name a step's result instead",
            where,
        )


def _check_backward(spec: ModelSpec, tensors: Tensors, leaves: set[str]) -> None:
    # A second backward without retain_graph is left to torch: it only fails where a node on
    # the way saved tensors (x * 3 does, x + 3 does not), which the checker cannot know.
    for backward in spec.backwards:
        # A step expected to fail may break the rules below: that is the lesson it teaches.
        lenient = backward.expect_error is not None
        info = _differentiable(tensors, backward.of, backward.where, "backward", lenient)
        _not_a_leaf(backward.of, leaves, backward.where, "backward")
        if backward.gradient is None:
            if not lenient:
                _scalar(info, backward.where, "backward", "`gradient:`")
        elif not lenient:
            _same_shape(backward.gradient, info, "gradient")


def _check_grads(spec: ModelSpec, tensors: Tensors, leaves: set[str]) -> None:
    for call in spec.grads:
        lenient = call.expect_error is not None
        info = _differentiable(tensors, call.of, call.where, "grad `of`", lenient)
        _not_a_leaf(call.of, leaves, call.where, "grad `of`")
        for name in call.wrt:
            _differentiable(tensors, name, call.where, "grad `wrt`", lenient)
        outputs = call.grad_outputs
        if outputs is None:
            if not lenient:
                _scalar(info, call.where, "grad", "`grad_outputs:` (ones, {one_hot: column} "
                                                  "or a literal)")
        elif outputs.kind == "value":
            assert outputs.value is not None
            if not lenient:
                _same_shape(outputs.value, info, "grad_outputs")
        elif outputs.kind == "one_hot":
            assert outputs.column is not None
            columns = info.shape[-1] if info.shape else 0
            if outputs.column >= columns:
                raise SpecShapeError(
                    f"one_hot column {outputs.column} does not exist: {call.of!r} has shape "
                    f"{show(info.shape)} ({columns} column(s) in its last dimension)",
                    call.where,
                )


def _check_hooks(spec: ModelSpec, tensors: Tensors, module_paths: set[str]) -> None:
    for item in spec.interventions:
        if item.action == "wrong_length" and item.hook == "tensor":
            # A tuple from a tensor hook is a TypeError of another kind ("expected Variable"),
            # not the length rule this action is there to show.
            raise SpecSchemaError(
                "wrong_length needs a hook that returns a tuple (backward, full_backward or "
                "full_backward_pre): a tensor hook returns one tensor, which has no length to "
                "get wrong; use wrong_shape to see torch refuse a tensor hook's replacement",
                item.where,
            )
        if item.action in ("wrong_length", "wrong_shape") and item.expect_error is None:
            # These actions exist to show torch's refusal: naming part of its message makes the
            # lesson a check that torch still refuses, and says so.
            raise SpecSchemaError(
                f"the {item.action} action returns what torch refuses; give `expect_error:` "
                "with part of torch's message (e.g. 'invalid number of grad_input' or 'changed "
                "the size of value')",
                item.where,
            )
        if item.hook == "tensor":
            _differentiable(tensors, item.target, item.where, "the tensor hook")
        elif item.target not in module_paths:
            raise SpecNameError(
                f"the intervention is on {item.target!r}, which is not a module path"
                f"{suggest(item.target, sorted(module_paths))} "
                '(the top-level model is "")',
                item.where,
            )
    for capture in spec.captures:
        check_not_builtin(capture.name, "capture", capture.where)
        if capture.module not in module_paths:
            raise SpecNameError(
                f"the capture {capture.name!r} names {capture.module!r}, which is not a "
                f"module path{suggest(capture.module, sorted(module_paths))}",
                capture.where,
            )


def _differentiable(tensors: Tensors, name: str, where: Location, role: str,
                    lenient: bool = False) -> TensorInfo:
    """The named tensor, which must exist and (unless `lenient`: a step expected to fail)
    require grad for a gradient to be asked of it."""
    info = tensors.get(name)
    if info is None:
        raise SpecNameError(
            f"{role} names {name!r}, which is not a tensor of this spec"
            f"{suggest(name, list(tensors))}",
            where,
        )
    if not info.requires_grad and not lenient:
        raise SpecNameError(
            f"{role} names {name!r}, which does not require grad: nothing upstream of it has "
            "requires_grad: true",
            where,
        )
    return info


def _scalar(info: TensorInfo, where: Location, role: str, seed: str) -> None:
    """Without a seed gradient, torch can only differentiate a one-element tensor."""
    if info.shape and shapes.numel(info.shape) != 1:
        raise SpecShapeError(
            f"{info.name!r} has shape {show(info.shape)}; {role} of a non-scalar needs {seed} "
            "(torch: grad can be implicitly created only for scalar outputs)",
            where,
        )


def _same_shape(init: TensorInit, info: TensorInfo, what: str) -> None:
    if init.shape != info.shape:
        raise SpecShapeError(
            f"{what} has shape {show(init.shape)}, but {info.name!r} has shape "
            f"{show(info.shape)}; they must match",
            init.where,
        )
