"""The vector-Jacobian-product lesson as plain, frozen, JSON-able data. No torch here.

`y.backward(gradient=v)` and `torch.autograd.grad(y, x, grad_outputs=v)` on a non-scalar `y`
never hand back the Jacobian J = ∂y/∂x: they return vᵀJ, one number per element of x. A
VjpLesson records one such call for one differentiated tensor: the seed v, torch's vᵀJ, the
Jacobian itself where it is small enough to show, the sum Σᵢ vᵢ·J[i] written out term by term,
and for a (batch, m) output the per-sample Jacobians. Every claim the lesson makes is an
Identity that was checked numerically when the lesson was made (gradexplain/vjp.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from gradexplain.records.check import Check, Failure
from gradexplain.records.trace import TensorValue

CallKind = Literal["backward", "grad"]
# "gradient": backward's gradient argument; the rest are the grad_outputs kinds of the spec.
SeedKind = Literal["gradient", "ones", "one_hot", "value"]
# How J was obtained: torch.func.jacrev of a function of an input, of a parameter (through
# torch.func.functional_call), or, for an intermediate tensor that no function argument can
# replace, row by row with batched torch.autograd.grad.
JacobianMethod = Literal["jacrev", "functional_call", "autograd"]


@dataclass(frozen=True)
class Identity:
    """One claim the lesson makes, checked numerically: `max_abs_err` between its two sides."""

    text: str
    verified: bool
    max_abs_err: float


@dataclass(frozen=True)
class RowTerm:
    """One term vᵢ·J[i] of vᵀJ: output element `output_index`, its seed weight, its J row."""

    output_index: tuple[int, ...]
    weight: float
    row: TensorValue


@dataclass(frozen=True)
class PerSample:
    """For an output (batch, m) and a wrt (batch, n): each sample's own m×n Jacobian block.

    `jacobian` has shape (batch, m, n), from torch.func.vmap(torch.func.jacrev(...)) over the
    samples, each sample's block taken in the full batch (that sample's row replaced, the others
    kept): never from a run on a batch of one, which a step such as squeeze or a fixed reshape
    can treat differently. Only made when the samples do not interact (J's cross-sample blocks
    are zero), so that each sample has a Jacobian of its own. `columns` are the m one-hot-column
    VJPs (grad_outputs with a 1 in column j of every row), each of shape (batch, n): column j's
    result is row j of every sample's block.
    """

    jacobian: TensorValue
    columns: tuple[TensorValue, ...]


@dataclass(frozen=True)
class VjpLesson:
    """One non-scalar backward or grad call, for one tensor it differentiates with respect to.

    `call` indexes spec.backwards (kind "backward") or spec.grads (kind "grad"). `column` is the
    one-hot column for seed_kind "one_hot", else None. `jacobian` (shape of_shape + wrt_shape)
    is None when it is too large to compute; `rows` is () when there are too many to list.
    `per_sample_skipped` says why `per_sample` is None for an output (batch, m) and an input
    (batch, n), where a reader would expect per-sample blocks (e.g. the samples interact); it
    is None when there are blocks, or when the shapes are not a batch at all.
    """

    kind: CallKind
    call: int
    of: str
    of_shape: tuple[int, ...]
    wrt: str
    wrt_shape: tuple[int, ...]
    seed: TensorValue
    seed_kind: SeedKind
    column: int | None
    result: TensorValue
    jacobian: TensorValue | None
    jacobian_method: JacobianMethod | None
    rows: tuple[RowTerm, ...]
    per_sample: PerSample | None
    identities: tuple[Identity, ...]
    per_sample_skipped: str | None = None

    @property
    def verified(self) -> bool:
        return all(identity.verified for identity in self.identities)

    def checked(self) -> Iterator[Failure]:
        """Each identity checked, as a check of the walk (a Failure where it did not hold)."""
        for identity in self.identities:
            yield Failure(None, f"vector-Jacobian product of {self.of} wrt {self.wrt}",
                          identity.text, Check(identity.verified, identity.max_abs_err, None))



__all__ = ["CallKind", "Identity", "JacobianMethod", "PerSample", "RowTerm", "SeedKind",
           "VjpLesson"]
