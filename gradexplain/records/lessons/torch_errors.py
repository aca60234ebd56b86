"""An error torch raised for one backward or autograd.grad call, in plain words (computed by
`capture/lessons/torch_errors.py`, shown by `render/lessons/calls.py`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorExplanation:
    """An error in plain words: `what` happened, `why` torch refuses it, and the `fix`."""

    what: str
    why: str
    fix: str


@dataclass(frozen=True)
class Attempt:
    """The call that failed, as the spec wrote it: `y.backward()` or `autograd.grad(...)`."""

    kind: str  # "backward" or "grad"
    of: str
    gradient: bool  # whether a gradient / grad_outputs was given
    retain_graph: bool
    earlier: tuple[int, ...]  # the runs before this one that went through the graph
