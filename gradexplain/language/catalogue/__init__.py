"""The whitelist: every function and `torch.nn` layer a spec may use, its signature and shape rule.

This is the single table both sides read. The checker binds a call against a rule's parameters and
asks the rule for the result's type; the builder binds the same way and calls `torch.<torch_path>`
or `torch.nn.<Layer>`. Only names in these tables ever reach torch, so a spec cannot name anything
else.
"""

from __future__ import annotations

from gradexplain.language.catalogue.functions import FUNCTIONS, FunctionRule, call_function
from gradexplain.language.catalogue.layers import LAYERS, MODULE_ATTRIBUTES, LayerRule
from gradexplain.language.catalogue.signature import (
    REQUIRED,
    WHOLE_NUMBERS,
    BindProblem,
    Options,
    Param,
    bind,
    did_you_mean,
)

RESERVED_NAMES = frozenset(FUNCTIONS) | {"torch", "nn", "F", "self", "grad", "backward"}


def attribute_advice(member: str, operand: str) -> str:
    """What to write instead of `operand.member` (the step language has only `.T`), as the end of
    a message: the function of that name if there is one, `detach` for `.data`, else nothing to
    suggest (a message must never name a function that does not exist)."""
    if member in FUNCTIONS:
        return f"; call the function instead: `{member}({operand})`"
    if member == "data":
        return f" (only `.T` is); for the value without its graph, call `detach({operand})`"
    return " (only `.T` is)"


__all__ = [
    "FUNCTIONS",
    "LAYERS",
    "MODULE_ATTRIBUTES",
    "REQUIRED",
    "RESERVED_NAMES",
    "WHOLE_NUMBERS",
    "BindProblem",
    "FunctionRule",
    "LayerRule",
    "Options",
    "Param",
    "attribute_advice",
    "bind",
    "call_function",
    "did_you_mean",
]
