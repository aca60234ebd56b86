"""What `analysis.diff` finds when it sets legacy hooks beside full ones: per module, each call's
arguments side by side (`ArgRow`), the reasons they differ (`Finding`) and a verdict. Frozen
and torch-free like every record; `render/` shows them, `analysis/diff.py` makes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gradexplain.records.walk import LabelledArg

FindingKind = Literal[
    "attach",       # where the legacy hook sits
    "unseen",       # a module argument whose gradient legacy grad_input lacks
    "extra",        # a legacy grad_input entry that is no module argument
    "order",        # legacy order follows the last op's operands
    "layout",       # the same tensor, transposed or reshaped
    "partial",      # only one use's share of a gradient
    "outputs",      # legacy grad_output lacks outputs another node made
    "never_fires",  # a hook that did not fire for this call
    "zeros",        # full grad_input holds zeros for an input that needs no grad
    "none",         # None entries, and why
    "refused",      # torch refuses full hooks on the module (an in-place op): none registered
    "user_hook",    # the model's own backward hook on the module runs in one pass only
]


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    text: str


@dataclass(frozen=True)
class ArgRow:
    """One argument name in both passes; a side is None when its hook has no such argument
    (or did not fire). `note` says why the two differ ("" when they are the same)."""

    name: str
    legacy: LabelledArg | None
    full: LabelledArg | None
    same: bool
    note: str


@dataclass(frozen=True)
class CallDiff:
    """One forward call of the module in one backward run: its legacy and full hook calls."""

    run: int
    call: int  # index of the module call in the pass's forward
    ordinal: int  # 1 for the module's first call, 2 for its second...
    legacy_seq: int | None
    full_seq: int | None
    rows: tuple[ArgRow, ...]
    findings: tuple[Finding, ...]


# How an argument without a name is shown: not a tensor, or an unnamed tensor outside the
# autograd graph (one that does not require grad: `x > 0`, a constant).
UNNAMED_ARGUMENT = "(not a tensor, or one without grad)"


@dataclass(frozen=True)
class ModuleDiff:
    """A module's calls side by side, what it takes (`arguments`, canonical names; None for a
    non-tensor), where its legacy hook sits (`last_node`, made `made` by `step`), a verdict."""

    module: str
    arguments: tuple[str | None, ...]
    last_node: str | None
    made: str | None
    step: str | None
    calls: tuple[CallDiff, ...]
    verdict: str

    def findings(self) -> list[Finding]:
        """Every call's findings, each once, in the order they first came."""
        return unique([finding for call in self.calls for finding in call.findings])


@dataclass(frozen=True)
class HookDiff:
    spec: str
    name: str
    torch: str
    modules: tuple[ModuleDiff, ...]
    # How the full hooks changed what the model computes (records.walk.PassWalk), if they did:
    # then the two passes' hooks sit on two different graphs.
    graph_changed: str | None = None


def unique(findings: list[Finding]) -> list[Finding]:
    """Each finding once, in first-seen order."""
    return list(dict.fromkeys(findings))


__all__ = ["UNNAMED_ARGUMENT", "ArgRow", "CallDiff", "Finding", "FindingKind", "HookDiff",
           "ModuleDiff", "unique"]
