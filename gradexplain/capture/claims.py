"""The check of a label: its claim (`Meaning`) evaluated in the hook-free run, from the claim
alone. The tensor is found by the name the claim gives it, the uses it is restricted to by the
names of the ops that read it, the layout applied as stated; never through the edge the labeller
followed. So a claim naming another tensor, dropping or changing a restriction, picking another
operand or stating another layout computes another value and fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import torch

from gradexplain.capture.checks import check, says_too_little
from gradexplain.capture.replay import Replay, RunValues
from gradexplain.records.frozen import quick_init
from gradexplain.records.graph import Edge, GraphView, Position
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import Check, Meaning

Ranked = tuple[int, int]


class ClaimError(Exception):
    """A claim that names nothing in the graph (or names it ambiguously): it cannot hold."""


class NotReplayed(Exception):
    """A claim about a share the check run could not compute: unchecked, and why."""


@quick_init
@dataclass(frozen=True)
class Evaluated:
    """A claim's check, or why it has none (a call torch refused: nothing to compare with)."""

    check: Check | None
    not_checked: str | None = None


class ClaimChecker:
    """Evaluates claims about one pass's hook arguments against its hook-free run."""

    def __init__(self, view: GraphView, replay: Replay) -> None:
        self.view = view
        self.replay = replay
        # Each claim about each recorded value evaluated once: the labeller hands the same
        # claim, and the tracer the same record, to every hook a gradient reaches. Keyed by the
        # objects (kept here, so that no other takes their id); both are frozen.
        self.evaluated: dict[tuple[int, int, int], tuple[Meaning, TensorValue, Evaluated]] = {}

    def evaluate(self, meaning: Meaning, run: int, value: TensorValue) -> Evaluated:
        key = (id(meaning), run, id(value))
        found = self.evaluated.get(key)
        if found is None:
            found = self.evaluated[key] = (meaning, value, self.evaluated_now(meaning, run, value))
        return found[2]

    def evaluated_now(self, meaning: Meaning, run: int, value: TensorValue) -> Evaluated:
        stale = None if meaning.stale_from is None else (meaning.stale_from,)
        runs = meaning.runs or stale or (run,)
        if any(item not in self.replay.runs for item in runs):
            return Evaluated(None, "the call torch refused has no hook-free result to compare")
        try:
            expected = self.expected(meaning, runs, value.shape)
        except NotReplayed as reason:
            return Evaluated(None, str(reason))
        except ClaimError as error:
            return Evaluated(Check(False, math.inf, None, str(error)))
        too_little = says_too_little(value)
        if too_little is not None and tuple(value.shape) == tuple(expected.shape):
            return Evaluated(None, too_little)
        return Evaluated(check(value, expected))

    def expected(self, meaning: Meaning, runs: tuple[int, ...],
                 shape: tuple[int, ...]) -> torch.Tensor:
        """The value the claim says the argument has, computed in the hook-free run."""
        if meaning.kind == "zero":
            return torch.zeros(shape)
        target = wrt = self.position(meaning.wrt)
        edges: list[Ranked] | None = None
        if meaning.layout == "summed":
            # The gradient of wrt expanded is the expand's own gradient, whatever else reads
            # wrt: the restriction to that expand is in what the claim names.
            target = self.expanded(meaning, target)
        elif meaning.via:
            edges = self.edges(target, meaning)
        total: torch.Tensor | None = None
        for run in runs:
            part = self.at(self.replay.runs[run], target, edges, shape)
            total = part if total is None else total + part
        assert total is not None
        if meaning.layout == "summed":
            self.summed_as_claimed(meaning, wrt, total)
        if meaning.layout == "transposed":
            if total.dim() != 2:
                raise ClaimError("only a matrix has a transpose")
            total = total.t()
        elif meaning.layout == "reshaped":
            if total.numel() != math.prod(shape):
                raise ClaimError("a reshape keeps the number of elements")
            total = total.reshape(shape)
        return total

    def summed_as_claimed(self, meaning: Meaning, wrt: Position,
                          expanded: torch.Tensor) -> None:
        """The claim's summed dims are those torch's own reduction of the broadcast sums
        (`sum_to_size` to wrt's shape in the check run), or a ClaimError: summing a tensor
        whose values are their own positions over the claimed dims must give what
        `sum_to_size` gives, exactly (whole numbers)."""
        shape = self.replay.position_shape((self.view.rank[wrt[0]], wrt[1]))
        found = _sums_as_claimed(tuple(expanded.shape), shape, meaning.summed_dims)
        if found is None:
            raise ClaimError(f"{meaning.wrt}'s shape {list(shape)} does not broadcast to the "
                             f"value's {list(expanded.shape)}")
        if not found:
            dims = meaning.summed_dims
            said = f"dims {list(dims)}" if dims else "nothing"
            raise ClaimError(f"the label sums over {said}, but {meaning.wrt}'s shape "
                             f"{list(shape)} broadcast to {list(expanded.shape)} sums others")

    def position(self, name: str) -> Position:
        found = self.view.named_positions.get(name, frozenset())
        if len(found) != 1:
            raise ClaimError(f"{name!r} names {len(found)} tensors of the graph")
        return next(iter(found))

    def expanded(self, meaning: Meaning, base: Position) -> Position:
        """The expansion of `wrt` the claim means: the one its `via` names, else its only one."""
        expands = {(user, 0) for user, _ in self.view.consumers.get(base, [])
                   if self.view.name_of(user).startswith("ExpandBackward")}
        if meaning.via:
            named = self.position(meaning.via[0].by)
            if named not in expands:
                raise ClaimError(f"{meaning.via[0].by} is not an expansion of {meaning.wrt}")
            return named
        if len(expands) != 1:
            raise ClaimError(f"{meaning.wrt} has {len(expands)} expansions; the claim names none")
        return next(iter(expands))

    def edges(self, position: Position, meaning: Meaning) -> list[Ranked]:
        """The edges the claim's uses of the tensor are, ranked as the check run has them."""
        return [(self.view.rank[node], number)
                for node, number in self.graph_edges(position, meaning)]

    def graph_edges(self, position: Position, meaning: Meaning) -> list[Edge]:
        """The edges the claim's uses of the tensor are: every read of it by each named op, or
        only the operand named."""
        found: list[Edge] = []
        for use in meaning.via:
            node = self.position(use.by)[0]
            # Every edge of the op leading to the tensor, also of an op only a full hook's
            # zeros reach (its share is zero, which is what the check run finds for it).
            numbers = [number for number, child in enumerate(self.view.nodes[node].next)
                       if self.view.resolve(child) == position
                       and (use.operand is None or number == use.operand)]
            if not numbers:
                raise ClaimError(f"{use.by} does not read {meaning.wrt}")
            found += [(node, number) for number in numbers]
        return found

    def locate(self, meaning: Meaning) -> tuple[Position, list[Edge] | None] | None:
        """Where in the pass's graph a claim's value flows: the position, and the edges it is
        restricted to (None: all of them); None for zeros and for a claim naming nothing."""
        if meaning.kind == "zero":
            return None
        try:
            target = self.position(meaning.wrt)
            if meaning.layout == "summed":
                return self.expanded(meaning, target), None
            return target, self.graph_edges(target, meaning) if meaning.via else None
        except ClaimError:
            return None

    def at(self, values: RunValues, position: Position, edges: list[Ranked] | None,
           shape: tuple[int, ...]) -> torch.Tensor:
        """The gradient at `position` in one call, or only the sum of `edges`' shares; zeros
        of the argument's shape where none flows (a node only a wrapper's zeros reach)."""
        ranked = (self.view.rank[position[0]], position[1])
        if edges is None:
            found = values.totals.get(ranked)
        else:
            for rank, _ in edges:
                if rank in self.replay.unreplayed:
                    raise NotReplayed(self.replay.unreplayed[rank])
            shares = [values.edges.get(edge) for edge in edges]
            present = [share for share in shares if share is not None]
            found = sum(present[1:], present[0]) if present else None
        if found is None:
            if ranked[0] < len(self.replay.order):
                return torch.zeros(self.replay.position_shape(ranked))
            return torch.zeros(shape)
        return found.detach()


@cache
def _sums_as_claimed(expanded: tuple[int, ...], shape: tuple[int, ...],
                     dims: tuple[int, ...]) -> bool | None:
    """Whether summing over `dims` reduces a tensor of shape `expanded` as torch's
    `sum_to_size(shape)` does (None: `shape` does not broadcast to `expanded`), on a tensor
    whose values are their own positions, so that the sums are exact whole numbers. Asked once
    per shapes and dims: checks repeat them."""
    probe = torch.arange(math.prod(expanded), dtype=torch.float64).reshape(expanded)
    try:
        reduced = probe.sum_to_size(shape)
    except RuntimeError:
        return None
    claimed = probe.sum(dim=dims, keepdim=True) if dims else probe
    return claimed.numel() == reduced.numel() and torch.equal(claimed.reshape(reduced.shape),
                                                              reduced)


__all__ = ["ClaimChecker", "ClaimError", "Evaluated"]
