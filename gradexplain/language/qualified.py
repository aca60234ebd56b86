"""Dotted names in steps (`m.h`, `m.l.weight`, `x.exp()`): always refused, with advice that fits.

A step reads only the names of its own module. Qualified names such as `module2.t` name tensors
in `backward`, `grad`, `interventions` and in the output, but not inside a step: `z = y + m.h`
would read a value from inside another module's call, which is ambiguous when the module is
called twice and invisible to that module's hooks. What to write instead depends on what the
first part is, which only the checker knows, so the parser hands a dotted name on and this
module turns it into the one-line error: return the value from the module, call the function by
its bare name, or declare a layer's weight as a parameter.
"""

from __future__ import annotations

from typing import NoReturn

from gradexplain.errors import Location, SpecError, SpecNameError, SpecSafetyError
from gradexplain.language.catalogue import FUNCTIONS, attribute_advice
from gradexplain.language.expr import Name, names_used
from gradexplain.language.model import ModuleSpec
from gradexplain.language.scope import Scope, module_label, suggest

OWN_NAMES = "a step reads only the names of its own module"


def refuse_dotted_names(module: ModuleSpec, scope: Scope, index: int) -> None:
    """Refuse the first dotted name step `index` reads, saying what to write instead."""
    step = module.steps[index]
    for name in names_used(step.assignment.expr):
        if "." in name.id:
            _refuse(module, scope, name, step.where.shifted(name.column))


def _refuse(module: ModuleSpec, scope: Scope, name: Name, where: Location) -> NoReturn:
    root, *members = name.id.split(".")
    entry = scope.get(root)
    if entry is None:
        if members[-1] in FUNCTIONS:  # `torch.exp(x)`, `F.relu(x)`
            raise SpecSafetyError(
                f"attribute access '.{members[-1]}' is not in the step language; call the "
                f"function by its bare name: `{members[-1]}(...)`", where)
        raise SpecNameError(
            f"unknown name {root!r} in {name.id!r}{suggest(root, scope)}; {OWN_NAMES}", where)
    if isinstance(entry.value, ModuleSpec):
        raise _inside_module(entry.value, name.id, members, where)
    if entry.kind == "layer":
        raise SpecNameError(_layer_weights(name.id), where)
    # A tensor: `x.exp()`, `x.shape`.
    member = members[0]
    instead = attribute_advice(member, root) if len(members) == 1 else " (only `.T` is)"
    raise SpecSafetyError(
        f"attribute access '.{member}' on the {entry.kind} {root!r} is not in the step "
        f"language{instead}", where)


def _inside_module(child: ModuleSpec, dotted: str, members: list[str],
                   where: Location) -> SpecError:
    """`m.h`: a name inside child module m, read from outside it."""
    member = members[0]
    kinds = _defined_in(child)
    kind = kinds.get(member)
    if kind is None:
        return SpecNameError(
            f"{module_label(child)} defines no {member!r}{suggest(member, list(kinds))}; "
            f"besides, {OWN_NAMES}", where)
    if kind == "layer" and len(members) > 1:
        return SpecNameError(_layer_weights(dotted), where)
    if kind in ("layer", "module"):
        return SpecNameError(
            f"{dotted!r} is the {kind} {member!r} inside {module_label(child)}, and {OWN_NAMES}: "
            f"call {child.name!r} itself, or move the step into the forward of {child.name!r}",
            where)
    if kind == "argument":
        return SpecNameError(
            f"{dotted!r} is the argument {member!r} of {module_label(child)}, and {OWN_NAMES}: "
            f"use the tensor passed to {child.name!r} where it is called", where)
    if len(members) > 1:  # `m.h.sum`: the tensor part would be refused next anyway
        return SpecSafetyError(
            f"attribute access '.{members[1]}' is not in the step language; besides, "
            f"{OWN_NAMES}", where)
    unpack = ", ".join(child.returns)
    if member in child.returns:
        return SpecNameError(
            f"{dotted!r} reads {member!r} inside {module_label(child)}, and {OWN_NAMES}; "
            f"{child.name!r} returns it already: use the result of the call "
            f"(`{unpack} = {child.name}(...)`)", where)
    returns = ", ".join((*child.returns, member))
    return SpecNameError(
        f"{dotted!r} reads the {kind} {member!r} inside {module_label(child)}, and {OWN_NAMES}; "
        f"return it from {child.name!r} (in its forward: `returns: [{returns}]`) and unpack the "
        f"call: `{returns} = {child.name}(...)`", where)


def _defined_in(module: ModuleSpec) -> dict[str, str]:
    """Every name a module defines, with its kind (the names in its own steps' scope)."""
    kinds = dict.fromkeys(module.args, "argument")
    kinds |= {param.name: "parameter" for param in module.params}
    kinds |= {layer.name: "layer" for layer in module.layers}
    kinds |= {child.name: "module" for child in module.modules}
    kinds |= {target: "step result" for step in module.steps for target in step.targets}
    return kinds


def _layer_weights(dotted: str) -> str:
    return (f"{dotted!r} reads a layer's weights, which are not names in the step language: "
            "to compute with a weight, declare it under `params:` and use that name "
            "(`y = x @ w.T + b`), or call the layer")
