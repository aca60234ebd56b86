"""How things are named, written once: a tensor's canonical name, its short and LaTeX forms, the
op a backward node computes, and the names torch gives the two nodes every stage looks for.
No torch here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

# The node full backward hooks wrap a module's tensor inputs and outputs in (an identity whose
# backward runs the hooks), and the node that adds a leaf's gradient into its `.grad`.
HOOK_WRAPPER = "BackwardHookFunctionBackward"
ACCUMULATE = "torch::autograd::AccumulateGrad"
# FSDP2 puts its own identity around the root's tensor inputs (its backward starts the
# reduce-scatter and hands the gradients on unchanged): a distributed walk's graph has it, the
# hook-free check run does not.
FSDP_WRAPPER = "RegisterPostBackwardFunctionBackward"
# DDP's identity around the model's outputs (find_unused_parameters, static_graph: its backward
# only queues the reducer's work).
DDP_WRAPPER = "_DDPSinkBackward"
# The nodes that hand each gradient on unchanged, output k to edge k: looked through wherever
# the real graph is read.
IDENTITY_NODES = frozenset({HOOK_WRAPPER, FSDP_WRAPPER, DDP_WRAPPER})


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
    """How a walk shows tensor names: one rule for labels, chain rule, diff and report.

    A tensor's short name is its canonical name qualified only as much as it takes to tell it
    from every other name of the walk (both passes): `t` for `module2.t` when no other tensor
    ends in `t`, but `conv1.weight` and `conv2.weight` where two layers have a `weight`
    (`encoder.0.weight`, never a bare `0.weight`). `shorts` holds that short form for every
    canonical name of the walk (built once by `Naming.of`, saved with the walk); a name it does
    not hold (a chain-rule description such as `conv1.weightᵀ`) is shown as it is.

    A `module:op` or `op#3` name is already unique and always whole. An empty table is a walk
    saved before the table existed: there a spec's tensors go by the last part of their path
    and a Python model's (`whole`) by their whole path, as they were then.
    """

    whole: bool = False
    shorts: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, names: Iterable[str], whole: bool = False) -> Naming:
        """The naming of a walk whose tensors have these canonical names."""
        every = sorted(set(names))
        paths = [name.split(".") for name in every if not _whole(name)]
        depth = max((len(parts) for parts in paths), default=0)
        # How many names end in each run of trailing parts (a shorter name counts whole).
        endings = Counter(tuple(parts[-count:]) for parts in paths
                          for count in range(1, depth + 1))
        return cls(whole, tuple((name, _shortest(name, endings)) for name in every))

    @cached_property
    def _table(self) -> dict[str, str]:
        return dict(self.shorts)

    def short(self, name: str) -> str:
        """What a person calls a tensor in a formula."""
        if self.shorts:
            return self._table.get(name, name)
        if _whole(name) or self.whole:
            return name
        return name.rsplit(".", 1)[-1]

    def latex(self, name: str) -> str:
        """A tensor name as LaTeX (see `latex_of`), shortened first."""
        return latex_of(self.short(name))


def _whole(name: str) -> bool:
    """A name that is not a dotted path of a tensor: `module:op`, `op#3`, `model input 0`."""
    return any(mark in name for mark in ":# ")


def _shortest(name: str, endings: Counter[tuple[str, ...]]) -> str:
    """The fewest trailing path parts of `name` that no other name of the walk ends in
    (`endings`), never starting at a bare index (`0.weight`)."""
    if _whole(name):
        return name
    parts = name.split(".")
    for count in range(1, len(parts)):
        tail = tuple(parts[-count:])
        if not tail[0].isdigit() and endings[tail] == 1:
            return ".".join(tail)
    return name


def distinct(named: Iterable[tuple[K, str]], taken: Iterable[str] = ()) -> dict[K, str]:
    """One name per key, no two alike: keys come in the order their suffix is given (the
    first of a name keeps it; later ones are `name@2`, `name@3`, ... as a module's second
    call is), skipping any name already `taken`."""
    used = set(taken)
    found: dict[K, str] = {}
    for key, name in named:
        unique, count = name, 1
        while unique in used:
            count += 1
            unique = f"{name}@{count}"
        used.add(unique)
        found[key] = unique
    return found


@lru_cache(maxsize=4096)  # the same few names, in every label of a deep model
def latex_of(short: str) -> str:
    """A short tensor name as LaTeX: `x`, `w_{1}`, `\\mathrm{weight}`, `t^{(2)}` for `t@2`."""
    called = re.fullmatch(r"(.*)@(\d+)", short)
    base, use = (called.group(1), called.group(2)) if called else (short, "")
    if re.fullmatch(r"[A-Za-z]", base):
        text = base
    elif match := re.fullmatch(r"([A-Za-z])_?(\d+)", base):
        text = f"{match.group(1)}_{{{match.group(2)}}}"
    else:
        escaped = base.replace("\\", "").replace("_", r"\_").replace(":", r"{:}")
        text = rf"\mathrm{{{escaped}}}"
    return f"{text}^{{({use})}}" if use else text


__all__ = ["ACCUMULATE", "DDP_WRAPPER", "FSDP_WRAPPER", "HOOK_WRAPPER", "IDENTITY_NODES",
           "Naming", "canonical_name", "distinct", "latex_of", "op_name", "op_title"]
