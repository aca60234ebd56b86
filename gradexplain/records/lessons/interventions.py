"""What the intervention lesson found, as plain frozen dataclasses. No torch here.

An intervention is a hook that returns a replacement gradient (the hooks article's last example:
a full backward hook on `Model` that normalizes grad_input to sum to 1). The lesson runs the
spec's differentiation twice on identical builds, without and with the hook, and records what
the hook replaced, which gradients changed, a check of every changed leaf gradient against an
independent vector-Jacobian product, and the rule in words. `capture/lessons/interventions.py`
runs it; the renderers read only these records, and `records/codec.py` saves and loads them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from gradexplain.language.model import ActionKind, InterventionHook
from gradexplain.records.check import Check, Failure
from gradexplain.records.paths import module_title
from gradexplain.records.trace import TensorValue

# "tensor": a named tensor's gradient, seen by a tensor hook; "leaf": a leaf's final `.grad`
# after `backward`; "result": what `torch.autograd.grad` returned for one of its `wrt` tensors.
ChangeKind = Literal["tensor", "leaf", "result"]


@dataclass(frozen=True)
class Replacement:
    """One gradient the intervention hook replaced, in the run with the hook.

    `call` is the forward call of the hooked module the hook call belongs to (from 1; always 1
    for a tensor hook); `argument` the hook argument (`grad_input[0]`, `grad_output[0]`, `grad`);
    `flows_into` what the replaced gradient is the gradient of: a tensor's name (`x1`,
    `module2.t`), or an autograd node where no name reaches it. `before` is what torch passed
    the hook, `after` what the hook returned in its place (None stays None).
    """

    call: int
    argument: str
    flows_into: str
    before: TensorValue | None
    after: TensorValue | None


@dataclass(frozen=True)
class GradChange:
    """One gradient without and with the intervention.

    `name` is the canonical name (the top-level one where there is one); `aliases` the other
    names of the same tensor in both runs (`module2.x` for `y`; not where a full hook hands the
    module a wrapped copy, which is a tensor of its own). `changed`: the two differ beyond float
    rounding. For leaves and results, `downstream` says
    whether the gradient is computed from the replaced gradients at all (a hook-free build's
    autograd graph reaches it from them), and `verified` / `max_abs_err` are the check that
    the value with the hook equals the value without plus the vector-Jacobian product of the
    replacement's change (None where there is no check: named tensors, a failed run).
    """

    name: str
    kind: ChangeKind
    without: TensorValue | None
    with_: TensorValue | None
    changed: bool
    downstream: bool | None = None
    verified: bool | None = None
    max_abs_err: float | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class InterventionLesson:
    """One `interventions:` item run without and with its hook, compared and checked.

    `hook` and `action` are the spec's; `target` the module path or tensor name it is on ("" is
    the top-level model); `describe` the action in words; `call` the differentiation both runs
    make, as Python (`output.backward()`); `node` the autograd node the hook sits on
    (`SigmoidBackward0` for a legacy hook, `BackwardHookFunctionBackward` for full hooks, None
    when it never fired). `replaced` holds every replaced gradient, `changes` every named
    tensor's gradient and every leaf `.grad` (or autograd.grad result) without and with the
    hook. `verified` holds when every checked gradient passed (None when nothing could be
    checked), `max_abs_err` is the largest error of those checks. `rule` says in plain words
    where the replacement goes and why each leaf gradient changed or not.

    When torch refuses the replacement (`wrong_length`, `wrong_shape`), `error` is the first
    line of its message, `error_rule` the rule the replacement broke, `changes` is empty, and
    `expected_error` says whether the message contains the spec's `expect_error`. `warnings`
    are the first lines of what torch warned while the hook was registered and run (the legacy
    hook's FutureWarning that it "will be missing some grad_input"), each once.
    """

    hook: InterventionHook
    target: str
    action: ActionKind
    describe: str
    call: str
    node: str | None
    replaced: tuple[Replacement, ...]
    changes: tuple[GradChange, ...]
    verified: bool | None
    max_abs_err: float
    rule: str
    error: str | None = None
    error_rule: str | None = None
    expect_error: str | None = None
    expected_error: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def failed_checks(self) -> tuple[GradChange, ...]:
        """The checked gradients whose value with the hook does not match the prediction."""
        return tuple(change for change in self.changes if change.verified is False)

    def checked(self) -> Iterator[Failure]:
        """The lesson's checks as checks of the walk: a call torch refused that the spec did not
        expect fails; the replacement's share adding up is checked when it was computed."""
        where = f"intervention {self.action} on {self.hook} {module_title(self.target)}"
        if self.error is not None and not self.expected_error:
            yield Failure(None, where, f"torch raised: {self.error}", Check(False, math.inf, None))
        if self.verified is not None:
            yield Failure(None, where, "every .grad with = without + the replacement's share",
                          Check(self.verified, self.max_abs_err, None))



__all__ = ["ChangeKind", "GradChange", "InterventionHook", "InterventionLesson", "Replacement"]
