"""What `walk` hands to the renderers: every hook argument with its label and its check, the
chain-rule derivation, and the final gradients. Plain, frozen, JSON-able data; no torch here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from gradexplain.trace_data import HookKind, Mode, Phase, TensorValue

Layout = Literal["as-is", "transposed", "reshaped", "summed"]


@dataclass(frozen=True)
class Meaning:
    """Which derivative a hook argument is: d`of`/d`wrt`, in the stated layout.

    `partial` names the uses a value flows through when it is only part of the derivative
    (a tensor used twice: each use's hook sees its own share); None when it is all of it.
    """

    of: str
    wrt: str
    aliases: tuple[str, ...]
    layout: Layout
    text: str
    latex: str
    partial: str | None = None
    modified: bool = False


@dataclass(frozen=True)
class Check:
    """The label's claim computed independently (a hook-free run) and compared with the value."""

    verified: bool
    max_abs_err: float
    expected: TensorValue | None


@dataclass(frozen=True)
class LabelledArg:
    name: str
    value: TensorValue | None
    meaning: Meaning | None
    check: Check | None


@dataclass(frozen=True)
class LabelledEvent:
    """One hook call with its arguments labelled; `why` says where a legacy hook sits and why.

    `call` is, for module backward hooks, the index of the module call (PassTrace.calls) it
    serves: how `diff` pairs a legacy call with the full one of the same forward call.
    """

    seq: int
    phase: Phase
    run: int
    hook: HookKind
    target: str
    node: str | None
    args: tuple[LabelledArg, ...]
    why: str | None = None
    call: int | None = None


@dataclass(frozen=True)
class Term:
    """One edge of a node in the derivation: upstream x local derivative = this gradient."""

    wrt: str
    local: str
    value: TensorValue | None
    check: Check | None


@dataclass(frozen=True)
class DerivationLine:
    """One autograd node of the chain rule, from its output's gradient to its inputs'."""

    node: str
    output: str
    upstream: TensorValue | None
    terms: tuple[Term, ...]
    has_rule: bool


@dataclass(frozen=True)
class Derivation:
    """The chain rule of one backward or autograd.grad call, from `of` back to every leaf."""

    run: int
    kind: Literal["backward", "grad"]
    of: str
    seed: TensorValue | None
    lines: tuple[DerivationLine, ...]


@dataclass(frozen=True)
class ModuleWarning:
    """A warning torch gave, once per module and message, with how often it came."""

    module: str | None
    category: str
    message: str
    phase: Phase
    count: int


@dataclass(frozen=True)
class FinalGrad:
    name: str
    value: TensorValue | None
    check: Check | None


@dataclass(frozen=True)
class PassWalk:
    """One pass (legacy or full module hooks): its labelled timeline and its final `.grad`s."""

    mode: Mode
    events: tuple[LabelledEvent, ...]
    grads: tuple[FinalGrad, ...]
    warnings: tuple[ModuleWarning, ...]


@dataclass(frozen=True)
class Failure:
    """A check that failed: where, and what was claimed."""

    mode: Mode | None
    where: str
    claim: str
    check: Check


@dataclass(frozen=True)
class Walk:
    spec: str
    name: str
    about: str | None
    torch: str
    passes: tuple[PassWalk, ...]
    derivations: tuple[Derivation, ...]
    interventions: int

    def checks(self) -> list[Check]:
        """Every check the walk made: hook arguments, final `.grad`s, chain-rule terms."""
        return [failure.check for failure in self._checked()]

    def failures(self) -> list[Failure]:
        """Every check that failed, in the order they appear in the output."""
        return [item for item in self._checked() if not item.check.verified]

    def _checked(self) -> Iterator[Failure]:
        """Every check with where it was made and what it claimed (a Failure if it failed)."""
        for walk_pass in self.passes:
            for event in walk_pass.events:
                for arg in event.args:
                    if arg.check is not None:
                        claim = arg.meaning.text if arg.meaning is not None else ""
                        yield Failure(walk_pass.mode, _event_where(event, arg.name), claim,
                                      arg.check)
            for grad in walk_pass.grads:
                if grad.check is not None:
                    yield Failure(walk_pass.mode, f"{grad.name}.grad", "final .grad", grad.check)
        for derivation in self.derivations:
            for line in derivation.lines:
                for term in line.terms:
                    if term.check is not None:
                        yield Failure(None, f"derivation of run {derivation.run}, {line.node}",
                                      f"{term.local} for {term.wrt}", term.check)


def _event_where(event: LabelledEvent, arg: str) -> str:
    target = event.target if event.target else "<model>"
    return f"#{event.seq} {event.hook} {target} {arg}"
