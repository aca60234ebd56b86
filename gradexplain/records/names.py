"""How things are named, written once: a tensor's canonical name, its short and LaTeX forms, the
op a backward node computes, and the names torch gives the two nodes every stage looks for.
No torch here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Naming:
    """How a walk shows tensor names. A spec's tensors go by the last part of their path
    (`module2.t` is t). A Python model's tensors have no names of their own: `head.weight` and
    `encoder.0.weight` are told apart only by their paths, so there (`whole`) names stay whole.
    Every stage that shows a name is handed the walk's Naming (`Walk.naming`)."""

    whole: bool = False

    def short(self, name: str) -> str:
        """What a person calls a tensor in a formula (a `module:op` name is always whole)."""
        if ":" in name or self.whole:
            return name
        return name.rsplit(".", 1)[-1]

    def latex(self, name: str) -> str:
        """A tensor name as LaTeX (see `latex_of`), shortened first."""
        return latex_of(self.short(name))


def latex_of(short: str) -> str:
    """A short tensor name as LaTeX: `x`, `w_{1}`, `\\mathrm{weight}`, `t^{(2)}` for `t@2`."""
    base, _, use = short.partition("@")
    if re.fullmatch(r"[A-Za-z]", base):
        text = base
    elif match := re.fullmatch(r"([A-Za-z])_?(\d+)", base):
        text = f"{match.group(1)}_{{{match.group(2)}}}"
    else:
        escaped = base.replace("\\", "").replace("_", r"\_").replace(":", r"{:}")
        text = rf"\mathrm{{{escaped}}}"
    return f"{text}^{{({use})}}" if use else text


__all__ = ["ACCUMULATE", "HOOK_WRAPPER", "Naming", "canonical_name", "latex_of", "op_name",
           "op_title"]
