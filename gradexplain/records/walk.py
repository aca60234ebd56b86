"""What `walk` hands to the renderers: every hook argument with its label and its check, the
chain-rule derivation, and the final gradients. Plain, frozen, JSON-able data; no torch here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Literal

from gradexplain.errors import first_line_of
from gradexplain.records.check import NOT_FINITE_SUMMARY, Check, Failure
from gradexplain.records.frozen import quick_init
from gradexplain.records.lessons.activations import ActivationLesson
from gradexplain.records.lessons.interventions import InterventionLesson
from gradexplain.records.lessons.torch_errors import ErrorExplanation
from gradexplain.records.lessons.vjp import VjpLesson
from gradexplain.records.names import Naming
from gradexplain.records.paths import module_title
from gradexplain.records.trace import (
    HookKind,
    Mode,
    Phase,
    Refusal,
    RunError,
    TensorValue,
    UserHook,
)

Layout = Literal["as-is", "transposed", "reshaped", "summed"]
# What a label claims a value is: a derivative; zeros (what torch hands on where no gradient
# flows); or a stale grad_output (torch's BackwardHook keeps the last one it saw, and a full
# hook whose output got no gradient in this call is handed the one a refused call left).
ClaimKind = Literal["derivative", "zero", "stale"]


@quick_init
@dataclass(frozen=True)
class Use:
    """One use of a tensor by an op, named by that op's output: a claim restricted to it means
    only the gradient flowing back through that op. `operand` narrows it to one of the op's
    operands when the op reads the tensor more than once (`h * h`: each operand's share)."""

    by: str
    operand: int | None = None


@quick_init
@dataclass(frozen=True)
class Meaning:
    """Which derivative a hook argument is: d`of`/d`wrt`, in the stated layout. This is the
    label's claim as data; `text` and `latex` are rendered from it, and the check computes
    exactly it (capture/claims.py), so a wrong claim cannot pass.

    `via` restricts it to some uses of `wrt` (a tensor used twice: each use's hook sees its own
    share); empty when it is all of d`of`/d`wrt`. `partial` is `via` as text. A `summed` layout
    is the gradient of `wrt` expanded (through the expand `via` names, where wrt has other
    uses): summed over `summed_dims` it gives d`of`/d`wrt` (via that expand). `runs` lists the
    backward calls a `.grad` holds, when more than the event's own; `stale_from` the call a
    stale grad_output was left by.
    `modified` says the value is not that derivative because a hook replaced what flows;
    `modified_by` names the user's own hook that did (capture/user_changes.py).
    """

    of: str
    wrt: str
    aliases: tuple[str, ...]
    layout: Layout
    text: str
    latex: str
    partial: str | None = None
    modified: bool = False
    kind: ClaimKind = "derivative"
    via: tuple[Use, ...] = ()
    summed_dims: tuple[int, ...] = ()
    runs: tuple[int, ...] = ()
    stale_from: int | None = None
    modified_by: str | None = None


@quick_init
@dataclass(frozen=True)
class Pin:
    """The chain-rule step a hook argument's value is: in derivation `run` (Derivation.run),
    line `line`, the term `term` (one edge's share), or with `term` None the gradient that
    line starts from (its `g`: the whole gradient of the line's output, the seed for the first
    line). `total` pins the sum of a tensor's shares where no line starts from it (an
    autograd.grad input): complete after term `term`."""

    run: int
    line: int
    term: int | None = None
    total: bool = False


@quick_init
@dataclass(frozen=True)
class LabelledArg:
    name: str
    value: TensorValue | None
    meaning: Meaning | None
    check: Check | None
    # Why a derivative has no check (None when it has one, or is not a derivative): a call
    # torch refused, or a graph the check run could not rebuild. Shown, never a failure.
    not_checked: str | None = None
    # The chain-rule step this value is (capture/pins.py); None for zeros, forward values and
    # what no derivation shows (a call torch refused, a full pass whose graph differs).
    pin: Pin | None = None


@quick_init
@dataclass(frozen=True)
class LabelledEvent:
    """One hook call with its arguments labelled; `why` says where a legacy hook sits and why.

    `call` is, for module backward hooks, the index of the module call (PassTrace.calls) it
    serves: how `diff` pairs a legacy call with the full one of the same forward call.
    `user`, `returned` and `changed`: a call of the user's own hook (records.trace.Event).
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
    user: str | None = None
    returned: tuple[LabelledArg, ...] | None = None
    changed: bool = False


# Where a tensor sits in the graph, the same in both passes: (the rank of its node in the real
# graph's breadth-first order from the output, the output number). What tells two tensors apart
# whatever they are called.
Place = tuple[int, int]


@quick_init
@dataclass(frozen=True)
class Term:
    """One edge of a node in the derivation: upstream x local derivative = this gradient.
    `at` is where the tensor `wrt` names sits."""

    wrt: str
    local: str
    value: TensorValue | None
    check: Check | None
    modified_by: str | None = None  # the user's hook that changed what the pass saw here
    at: Place | None = None
    edge: int | None = None  # which edge of the line's node this is (its input number)


@quick_init
@dataclass(frozen=True)
class DerivationLine:
    """One autograd node of the chain rule, from its output's gradient to its inputs'.
    `at` is where the tensor `output` names sits. A node with several outputs that got a
    gradient (unbind, split, an RNN's out, h and c) takes all of them back at once: `others`
    names the rest, after `output`, and `upstream` is then `output`'s alone."""

    node: str
    output: str
    upstream: TensorValue | None
    terms: tuple[Term, ...]
    has_rule: bool
    at: Place | None = None
    others: tuple[str, ...] = ()


@dataclass(frozen=True)
class Derivation:
    """The chain rule of one backward or autograd.grad call, from `of` back to every leaf."""

    run: int
    kind: Literal["backward", "grad"]
    of: str
    seed: TensorValue | None
    lines: tuple[DerivationLine, ...]
    # Later calls that computed the same chain (the same model, output and seed): shown once.
    repeats: tuple[int, ...] = ()


@dataclass(frozen=True)
class ModuleWarning:
    """A warning torch gave, once per module and message, with how often it came."""

    module: str | None
    category: str
    message: str
    phase: Phase
    count: int


@quick_init
@dataclass(frozen=True)
class FinalGrad:
    name: str
    value: TensorValue | None
    check: Check | None
    modified_by: str | None = None  # the user's hook that changed it (then not checked)


# What a call torch refused in one pass alone counts as: a failed check.
PASS_FAILURE_CLAIM = "a call torch refused in this pass, not as in the other pass"


@dataclass(frozen=True)
class PassFailure:
    """A backward or grad call that torch refused in this pass, not as in the other pass (which
    ran it, or refused it with another error): a hook only this pass registers made it fail
    (a full backward hook of the model's own returning a gradient of another shape)."""

    run: int
    kind: Literal["backward", "grad"]
    of: str
    error: RunError

    @property
    def where(self) -> str:
        return f"run {self.run}, {self.kind} of {self.of}"

    def sentence(self) -> str:
        """What happened, in one line: `run 1, backward of loss: torch raised RuntimeError in
        this pass, not as in the legacy pass: <torch's first line>`."""
        return (f"{self.where}: torch raised {self.error.category} in this pass, not as in the "
                f"legacy pass: {first_line_of(self.error.message)}")


@dataclass(frozen=True)
class PassWalk:
    """One pass (legacy or full module hooks): its labelled timeline and its final `.grad`s."""

    mode: Mode
    events: tuple[LabelledEvent, ...]
    grads: tuple[FinalGrad, ...]
    warnings: tuple[ModuleWarning, ...]
    # How this pass's hooks changed what the model computes (the full pass's graph differs
    # from the legacy one's), said plainly; None when they did not.
    graph_changed: str | None = None
    user_hooks: tuple[UserHook, ...] = ()  # the user's own hooks, and whether this pass ran them
    # Modules torch refuses full hooks on (an in-place op): no full events for them.
    refusals: tuple[Refusal, ...] = ()
    # The calls torch refused in this pass, not as in the legacy pass (whose calls are the
    # walk's `runs`): each a failed check.
    failed_runs: tuple[PassFailure, ...] = ()


@quick_init
@dataclass(frozen=True)
class LeafGrad:
    """One leaf's `.grad` around one call: before, what the call adds (computed in the
    hook-free run: nothing for autograd.grad), and after, checked to be before + added."""

    name: str
    before: TensorValue | None
    added: TensorValue | None
    after: TensorValue | None
    check: Check | None
    modified_by: str | None = None  # the user's hook that changed it (then not checked)


@dataclass(frozen=True)
class RunStep:
    """One backward or autograd.grad call as the spec ran it, in order, with every leaf's
    `.grad` around it and, if torch refused it, the error explained.

    `post_accumulate` counts the post-accumulate-grad hook calls it caused (none under
    autograd.grad); `expect_error` is the text the spec expects torch's error to contain
    (`expect_error:`), and the error's `expected` says whether it did.
    """

    run: int
    kind: Literal["backward", "grad"]
    of: str
    wrt: tuple[str, ...]
    seed: TensorValue | None
    zeroed: bool
    retain_graph: bool
    leaves: tuple[LeafGrad, ...]
    post_accumulate: int
    error: RunError | None = None
    explanation: ErrorExplanation | None = None
    expect_error: str | None = None  # the text the spec expects torch's message to contain

    @property
    def unexpected(self) -> bool:
        return self.error is not None and not self.error.expected


@dataclass(frozen=True)
class Lessons:
    """What the spec asks beyond the hook walk, each run and checked on its own builds:
    vector-Jacobian products of seeded calls, interventions (with against without), and
    forward-hook captures."""

    vjp: tuple[VjpLesson, ...] = ()
    interventions: tuple[InterventionLesson, ...] = ()
    captures: tuple[ActivationLesson, ...] = ()

    def all(self) -> Iterator[VjpLesson | InterventionLesson | ActivationLesson]:
        """Every lesson computed, in field order (each lists its checks: `checked`)."""
        for field in fields(self):
            yield from getattr(self, field.name)


@dataclass(frozen=True)
class Walk:
    spec: str
    name: str
    about: str | None
    torch: str
    passes: tuple[PassWalk, ...]
    derivations: tuple[Derivation, ...]
    interventions: int
    runs: tuple[RunStep, ...] = ()
    lessons: Lessons = Lessons()
    # A Python model's walk (the report says "model", not "spec").
    whole_names: bool = False
    # Every canonical tensor name of the walk with its short form (records.names.Naming).
    short_names: tuple[tuple[str, str], ...] = ()

    @cached_property
    def naming(self) -> Naming:
        """How this walk shows tensor names."""
        return Naming(self.whole_names, self.short_names)

    def summaries_not_checked(self) -> int:
        """How many labelled values went unchecked because their summary holds a nan or an inf
        (`NOT_FINITE_SUMMARY`): said under the verdict, which counts checks made."""
        return sum(1 for walk_pass in self.passes for event in walk_pass.events
                   for arg in event.args if arg.not_checked == NOT_FINITE_SUMMARY)

    def checks(self) -> list[Check]:
        """Every check the walk made: hook arguments, final `.grad`s, chain-rule terms."""
        return [failure.check for failure in self._checked()]

    def failures(self) -> list[Failure]:
        """Every check that failed, in the order they appear in the output."""
        return [item for item in self._checked() if not item.check.verified]

    def run_checks(self) -> Iterator[Failure]:
        """The backward calls' checks: each leaf's `.grad` after a call against before + what
        it added, and a call torch refused that the spec did not expect (a failed check)."""
        for step in self.runs:
            where = f"run {step.run}, {step.kind} of {step.of}"
            for leaf in step.leaves:
                if leaf.check is not None:
                    yield Failure(None, f"{where}, {leaf.name}.grad", ".grad before + added",
                                  leaf.check)
            if step.error is not None and step.unexpected:
                expected = ("which the spec did not expect" if step.expect_error is None
                            else "not with the error the spec expects")
                yield Failure(None, where, f"a call torch refused ({step.error.category}), "
                              f"{expected} (explained above)", Check(False, math.inf, None))

    def lesson_checks(self) -> Iterator[Failure]:
        """The lessons' own checks (their identities, against the hook-free run)."""
        for lesson in self.lessons.all():
            yield from lesson.checked()

    def _checked(self) -> Iterator[Failure]:
        """Every check with where it was made and what it claimed (a Failure if it failed).

        A call torch refused that the spec did not expect counts as a failed check."""
        yield from self.run_checks()
        yield from self.lesson_checks()
        for walk_pass in self.passes:
            for failure in walk_pass.failed_runs:
                yield Failure(walk_pass.mode, failure.where, PASS_FAILURE_CLAIM,
                              Check(False, math.inf, None))
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
    return f"#{event.seq} {event.hook} {module_title(event.target)} {arg}"


__all__ = ["PASS_FAILURE_CLAIM", "Check", "Derivation", "DerivationLine", "Failure", "FinalGrad",
           "LabelledArg", "LabelledEvent", "Layout", "LeafGrad", "Lessons", "Meaning",
           "ModuleWarning", "PassFailure", "PassWalk", "Pin", "Place", "RunStep", "Term", "Use",
           "Walk"]
