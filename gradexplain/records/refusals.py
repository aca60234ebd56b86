"""The sentence every renderer gives a module torch refuses full backward hooks on (a Refusal,
found by the in-place probe): which in-place op, on what, in whose forward. No torch here."""

from __future__ import annotations

from gradexplain.records.paths import module_title
from gradexplain.records.trace import Refusal

_WHAT = {
    "input": "its input is modified in place",
    "output": "its output is modified in place",
    "aliased": "a tensor of its call shares memory with one modified in place",
    "return_type": "it returns a result torch's full-hook wrapper cannot rebuild around the "
                   "views it makes of its tensors",
}


def refusal_text(refusal: Refusal) -> str:
    """`torch refuses full backward hooks on layer1.0.bn2: its output is modified in place by
    `+=` (add_) in layer1.0.forward; its legacy hook is shown, its full hooks are not
    registered`."""
    return (f"torch refuses full backward hooks on {module_title(refusal.module)}: "
            f"{refusal_cause(refusal)}; its legacy hook is shown, its full hooks are not "
            "registered")


def refusal_cause(refusal: Refusal) -> str:
    """What torch refuses: `its output is modified in place by `+=` (add_) in layer1.0.forward`."""
    return f"{_WHAT[refusal.reason]}{_by(refusal)}{_where(refusal)}"


def _by(refusal: Refusal) -> str:
    if refusal.op is None:
        return ""
    if refusal.reason == "return_type":
        return f" (torch.return_types.{refusal.op}, which takes one sequence, not its items)"
    if refusal.operator is not None:
        return f" by `{refusal.operator}` ({refusal.op})"
    return f" by {refusal.op}"


def _where(refusal: Refusal) -> str:
    if refusal.reason == "return_type" or (refusal.op is None and refusal.where is None):
        return ""
    if refusal.where is None:
        return " outside every module's forward"
    return f" in {module_title(refusal.where)}.forward"


__all__ = ["refusal_cause", "refusal_text"]
