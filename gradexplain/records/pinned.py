"""The pinned view: the answer a reader came for, made of records the walk already holds.

- `Answer`: per module call, what its legacy and its full backward hook get, as derivatives,
  and whether they are the same;
- `PinnedDerivation`: the chain rule, every step with the hook arguments whose value is that
  step (records.walk.Pin), in the order autograd computes them.

Frozen and torch-free; `analysis/pinned.py` makes them, `render/` shows them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gradexplain.records.check import Check
from gradexplain.records.trace import HookKind, Mode, TensorValue
from gradexplain.records.walk import Derivation, Use


@dataclass(frozen=True)
class HookRef:
    """One hook argument pinned to a step, as a reader names it (`module2.grad_input[0]`,
    `tensor hook on t`). `note` says how its value differs from the step's, where it does
    (your hook changed it; a `.grad` summed over calls; a stale grad_output)."""

    mode: Mode
    hook: HookKind
    text: str
    check: Check | None
    note: str | None = None

    @property
    def holds(self) -> bool:
        """Its label's check did not fail (or it has none: zeros, a changed value)."""
        return self.check is None or self.check.verified


@dataclass(frozen=True)
class Pinned:
    """The hook arguments of one step: of the legacy pass, of the full pass, and those both
    passes have alike (tensor and leaf hooks), each once."""

    legacy: tuple[HookRef, ...] = ()
    full: tuple[HookRef, ...] = ()
    both: tuple[HookRef, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.legacy or self.full or self.both)


@dataclass(frozen=True)
class PinnedTerm:
    """One share: `derivative` is what the term computes (`∂z/∂t`; `∂z/∂x (only the part via
    y)` when x has other uses in this call), of the tensor `wrt`; `local` the rule applied to
    g."""

    derivative: str
    wrt: str
    via: Use | None  # the use this share is of, when the tensor has others in this call
    local: str
    value: TensorValue | None
    check: Check | None
    modified_by: str | None
    pinned: Pinned
    # The tensor's whole gradient, where no line starts from it (an autograd.grad input):
    # complete after this, its last share (`total_of` its name, with the arguments of it).
    total_of: str | None = None
    total_pinned: Pinned = Pinned()


@dataclass(frozen=True)
class PinnedLine:
    """One autograd node: the gradient it starts from (`g`, with the arguments that are it)
    and its shares. `shares` > 1: g is the sum of that many shares computed above. `others`:
    the node's other outputs, whose gradients g holds too (DerivationLine), and
    `other_gradients` those gradients' claims, as `gradient` is `output`'s."""

    node: str
    output: str
    gradient: str
    upstream: TensorValue | None
    has_rule: bool
    shares: int
    pinned: Pinned
    terms: tuple[PinnedTerm, ...]
    others: tuple[str, ...] = ()
    other_gradients: tuple[str, ...] = ()


@dataclass(frozen=True)
class PinnedDerivation:
    derivation: Derivation
    lines: tuple[PinnedLine, ...]
    hidden: int = 0  # lines a --module or --hook filter left out (no argument shown is there)
    # Arguments of its calls no step shows, each with its label (and why) in `note`: zeros
    # where no gradient flows, and what is no single step.
    unpinned: tuple[HookRef, ...] = ()


@dataclass(frozen=True)
class AnswerRow:
    """One module call: legacy and full grad_input and grad_output as derivatives (`None`
    where the hook has no such argument or did not fire), `same_*` whether they agree."""

    module: str
    call: str  # "" or "call 2, run 1" where the module or the run is not the only one
    legacy_input: tuple[str, ...] | None
    full_input: tuple[str, ...] | None
    legacy_output: tuple[str, ...] | None
    full_output: tuple[str, ...] | None
    same_input: bool
    same_output: bool


@dataclass(frozen=True)
class PinnedView:
    answers: tuple[AnswerRow, ...]
    derivations: tuple[PinnedDerivation, ...]
    # Arguments of calls no chain rule shows (torch refused them), with their labels.
    elsewhere: tuple[HookRef, ...] = ()
    # How many arguments of a pass whose hooks changed the graph (PassWalk.graph_changed) sit
    # on that other graph: no step of the chain rule (the legacy pass's) is theirs.
    other_graph: tuple[tuple[Mode, int], ...] = ()


# The answer's title (text shows it in lower case, as its other section titles).
ANSWER_TITLE = "What each module's backward hooks get"


def compared(modes: Sequence[Mode]) -> str:
    """What the answer sets side by side: both passes, or the one shown."""
    if len(modes) == 2:
        return "legacy against full"
    return f"the {modes[0]} pass only (--pass {modes[0]})" if modes else "no pass"


def other_graph_text(mode: Mode, count: int) -> str:
    """Why a pass whose hooks changed the graph has no argument pinned (PinnedView)."""
    return (f"the {mode} pass's {count} hook arguments are on another graph (its hooks changed "
            "what the model computes, see its note), so none is pinned to a step of the chain "
            "rule; the timeline shows each with its label and check")


def hidden_steps_text(count: int) -> str:
    """What a chain rule filtered by `--hook`/`--module` says of the steps it leaves out."""
    return (f"{count:,} step{'' if count == 1 else 's'} with none of the shown hook arguments "
            "left out")


__all__ = [
    "ANSWER_TITLE",
    "AnswerRow",
    "HookRef",
    "Pinned",
    "PinnedDerivation",
    "PinnedLine",
    "PinnedTerm",
    "PinnedView",
    "compared",
    "hidden_steps_text",
    "other_graph_text",
]
