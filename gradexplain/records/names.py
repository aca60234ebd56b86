"""How things are named, written once: a tensor's canonical name, its short and LaTeX forms, the
op a backward node computes, and the names torch gives the two nodes every stage looks for.
No torch here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# The node full backward hooks wrap a module's tensor inputs and outputs in (an identity whose
# backward runs the hooks), and the node that adds a leaf's gradient into its `.grad`.
HOOK_WRAPPER = "BackwardHookFunctionBackward"
ACCUMULATE = "torch::autograd::AccumulateGrad"


def op_title(node_name: str) -> str:
    """The op a backward node computes, as torch spells it: `SigmoidBackward0` -> `Sigmoid`."""
    return re.sub(r"Backward\d*$", "", node_name) or node_name


def op_name(node_name: str) -> str:
    """The op as a name part: `AddmmBackward0` -> `addmm`."""
    return op_title(node_name).lower()


def canonical_name(names: list[str] | tuple[str, ...]) -> str | None:
    """A tensor's canonical name: the top-level one if it has one (no module path, and not a
    Python model's `module:op` name), else the first qualified one; None for a tensor without
    names."""
    top = [name for name in names if "." not in name and ":" not in name]
    if top:
        return top[0]
    return names[0] if names else None


# A Python model's tensors have no names of their own: `head.weight` and `encoder.0.weight` are
# told apart only by their paths, so while this is set every name is shown whole.
_whole_names: ContextVar[bool] = ContextVar("gradexplain_whole_names", default=False)


@contextmanager
def whole_names(on: bool) -> Iterator[None]:
    """Within the block, `short_name` keeps module paths when `on` (a Python model's walk)."""
    token = _whole_names.set(on)
    try:
        yield
    finally:
        _whole_names.reset(token)


def short_name(name: str) -> str:
    """What a person calls a tensor in a formula: the last part of its path (`module2.t` -> t);
    the whole name for a Python model's tensors (see `whole_names`)."""
    if ":" in name or _whole_names.get():
        return name
    return name.rsplit(".", 1)[-1]


def latex_name(name: str) -> str:
    """A tensor name as LaTeX: `x`, `w_{1}`, `\\mathrm{weight}`, `t^{(2)}` for `t@2`."""
    base, _, use = short_name(name).partition("@")
    if re.fullmatch(r"[A-Za-z]", base):
        text = base
    elif match := re.fullmatch(r"([A-Za-z])_?(\d+)", base):
        text = f"{match.group(1)}_{{{match.group(2)}}}"
    else:
        escaped = base.replace("\\", "").replace("_", r"\_").replace(":", r"{:}")
        text = rf"\mathrm{{{escaped}}}"
    return f"{text}^{{({use})}}" if use else text


__all__ = ["ACCUMULATE", "HOOK_WRAPPER", "canonical_name", "latex_name", "op_name", "op_title",
           "short_name", "whole_names"]
