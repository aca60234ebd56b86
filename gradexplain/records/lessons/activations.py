"""What the activations lesson found (a spec's `captures:`: activations stored by a forward hook),
as plain frozen dataclasses. No torch here.

The lesson is the class-activation-map pattern of the hooks tutorial: a forward hook on an
intermediate module appends that module's output to a list (the article's `save_feat`), and the
user removes the hook with `handle.remove()` once the activation is stored.
`capture/lessons/activations.py` runs it; the renderers read only these records, and
`records/codec.py` saves and loads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gradexplain.records.check import Check, Failure
from gradexplain.records.trace import TensorValue


@dataclass(frozen=True)
class ForwardCall:
    """One forward call of the model while the capture ran (`number` counts from 1).

    `hooked`: the hook was still registered during this call; `entries`: how many times the hook
    appended (once per call of the module, so more than 1 for a module called several times);
    `stored_count`: the list's length after this call; `removed_after`: `handle.remove()` was
    called right after this forward.
    """

    number: int
    hooked: bool
    fired: bool
    entries: int
    stored_count: int
    removed_after: bool


@dataclass(frozen=True)
class StoredEntry:
    """One item of the list: what one call of the hook appended, checked.

    `values` holds one TensorValue per output tensor of the module (one for a layer); `index` is
    the position in the list, `forward` the forward call that appended it, `call` which call of
    the module within that forward (from 0). `expected` is the hook-free run's value the entry is
    compared with (its first output tensor).
    """

    index: int
    forward: int
    call: int
    values: tuple[TensorValue, ...]
    verified: bool
    max_abs_err: float
    expected: TensorValue | None


@dataclass(frozen=True)
class ActivationLesson:
    """One `captures:` item run as the article does, and checked against a hook-free run.

    `output_names` are the module-qualified names the steps calling the module give its output
    (what the stored entries are checked against, e.g. `net.c1`; `net.c1:conv1` where the call
    sits inside a larger expression, as in `c1 = sigmoid(conv1(x))`); `calls_per_forward` is how
    often the hook-free forward calls the module; `output_shape` the shape of its (first) output,
    None where the forward never calls it. `remove_after` is the spec's: `handle.remove()` after
    that many forward calls (0: before the first), None: never by the user. `verified` holds when
    every stored entry equals the hook-free value and every forward appended as many entries as
    the module was called while hooked (none after the removal); `max_abs_err` is the largest
    difference over the entries (inf where a count or a shape differs).
    """

    name: str
    module: str
    output_names: tuple[str, ...]
    calls_per_forward: int
    output_shape: tuple[int, ...] | None
    remove_after: int | None
    forwards: tuple[ForwardCall, ...]
    stored: tuple[StoredEntry, ...]
    verified: bool
    max_abs_err: float

    @property
    def removed(self) -> bool:
        """Whether the user's `handle.remove()` ran (the lesson's second half)."""
        return self.remove_after is not None

    def checked(self) -> Iterator[Failure]:
        """The stored activations compared with a hook-free forward, as a check of the walk."""
        yield Failure(None, f"capture {self.name} on {self.module}",
                      "stored activations equal a hook-free forward",
                      Check(self.verified, self.max_abs_err, None))



__all__ = ["ActivationLesson", "ForwardCall", "StoredEntry"]
