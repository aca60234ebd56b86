"""The autograd graph of a pass as labelling needs it: the real nodes, with full hooks' identity
wrappers (BackwardHookFunctionBackward) looked through. No torch here.

A *position* is a tensor's place in the graph: (node id, output number); a leaf's is its
AccumulateGrad node with output 0. An *edge* is (consumer node id, input number): the gradient
flowing along it is the consumer's share of its input's gradient. A tensor's whole gradient is
the sum over all its edges; a hook that sees fewer edges sees only part of it.

The same breadth-first order over real nodes is computed here from recorded data and in
`replay` from live torch nodes, which is how the hook-free check run finds the same node.

A full hook's wrapper has more edges than the real graph: its backward fills in zeros for every
output that got no gradient (a module argument forward never uses), so torch also runs nodes the
output does not depend on, which the hook-free graph does not have. They are numbered after the
real order (`zero_only`): looked up in the check run they find nothing, which is the truth.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from gradexplain.records.names import (
    ACCUMULATE,
    IDENTITY_NODES,
    canonical_name,
    distinct,
    op_name,
)
from gradexplain.records.trace import GraphNode, PassTrace, TensorRecord

Position = tuple[str, int]
Edge = tuple[str, int]
N = TypeVar("N", bound=Hashable)


def resolve_through(
    node: N | None, number: int, edges: Callable[[N], Sequence[tuple[N | None, int]]],
    is_identity: Callable[[N], bool],
) -> tuple[N, int] | None:
    """Follow identity wrappers from a position down to the real one (None: no gradient)."""
    while node is not None and is_identity(node):
        node, number = edges(node)[number]
    return None if node is None else (node, number)


def real_order(
    roots: Sequence[tuple[N | None, int]], edges: Callable[[N], Sequence[tuple[N | None, int]]],
    is_identity: Callable[[N], bool],
) -> list[N]:
    """The real nodes reachable from `roots`, breadth first, identity wrappers looked through."""
    def real(positions: Iterable[tuple[N | None, int]]) -> list[N]:
        found = (resolve_through(node, number, edges, is_identity) for node, number in positions)
        return [item[0] for item in found if item is not None]

    return breadth_first(real(roots), lambda node: real(edges(node)))


# A graph's shape, node by node in breadth-first order: its name and, for each edge, the rank of
# the real node it leads to (None: no gradient) and that node's output number. Two runs with the
# same signature built the same graph; the same names alone do not say that (`a * 3` and
# `a * b` are both MulBackward0).
Signature = tuple[tuple[str, tuple[tuple[int | None, int], ...]], ...]


def signature(
    order: Sequence[N], name: Callable[[N], str],
    edges: Callable[[N], Sequence[tuple[N | None, int]]], is_identity: Callable[[N], bool],
) -> Signature:
    """The signature of the real nodes `order` lists (wrappers looked through)."""
    rank = {node: index for index, node in enumerate(order)}

    def target(node: N | None, number: int) -> tuple[int | None, int]:
        found = resolve_through(node, number, edges, is_identity)
        return (None, number) if found is None else (rank.get(found[0]), found[1])

    return tuple((name(node), tuple(target(child, number) for child, number in edges(node)))
                 for node in order)


def breadth_first(starts: Iterable[N], children: Callable[[N], Iterable[N]]) -> list[N]:
    """Every node reachable from `starts`, each once, in breadth-first order."""
    queue: deque[N] = deque(starts)
    seen: set[N] = set()
    order: list[N] = []
    while queue:
        node = queue.popleft()
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        queue.extend(children(node))
    return order


@dataclass
class GraphView:
    """A pass's graph with identity wrappers looked through, and the names of its positions."""

    trace: PassTrace

    def __post_init__(self) -> None:
        self.nodes: dict[str, GraphNode] = {node.id: node for node in self.trace.graph}
        # Asked of every node on every walk through the graph: looked up once.
        self.identities = frozenset(node.id for node in self.trace.graph
                                    if node.name in IDENTITY_NODES)
        self.uses_of: dict[Position, frozenset[Edge]] = {}
        self.shape: Signature | None = None
        roots = [self.raw_position(run.root) for run in self.trace.runs]
        self.order: list[str] = real_order(
            [(pos[0], pos[1]) if pos else (None, 0) for pos in roots], self._edges,
            self.is_identity)
        self.rank: dict[str, int] = {node: index for index, node in enumerate(self.order)}
        self.zero_only: list[str] = [
            node for node in self.engine_order(roots) if node not in self.rank]
        self.rank.update({node: len(self.order) + index
                          for index, node in enumerate(self.zero_only)})
        self.raw_consumers: dict[Position, list[Edge]] = {}
        for node in self.trace.graph:
            for number, (child, output) in enumerate(node.next):
                if child is not None:
                    self.raw_consumers.setdefault((child, output), []).append((node.id, number))
        self.consumers: dict[Position, list[Edge]] = {}
        for node_id in self.order:
            for number, (child, output) in enumerate(self.nodes[node_id].next):
                real = self.resolve((child, output))
                if real is not None:
                    self.consumers.setdefault(real, []).append((node_id, number))
        self.names: dict[Position, list[str]] = {}
        for record in self.trace.tensors:
            position = self.resolve(self.raw_position(record.index))
            if position is not None:
                self.names.setdefault(position, []).extend(record.names)

    def _edges(self, node_id: str) -> Sequence[tuple[str | None, int]]:
        return self.nodes[node_id].next

    def shape_at(self, position: Position) -> tuple[int, ...] | None:
        """The shape of the tensor at `position` (None: not recorded)."""
        shapes = self.nodes[position[0]].shapes
        return shapes[position[1]] if position[1] < len(shapes) else None

    def signature(self) -> Signature:
        """The shape of the pass's real graph (see `signature`)."""
        if self.shape is None:
            self.shape = signature(self.order, self.name_of, self._edges, self.is_identity)
        return self.shape

    def engine_order(self, roots: Sequence[Position | None]) -> list[str]:
        """The real nodes torch may run from `roots`, breadth first, following every edge of
        a wrapper too (not only the one a position resolves through)."""
        reached = breadth_first(
            (position[0] for position in roots if position is not None),
            lambda node: [child for child, _ in self.nodes[node].next if child is not None])
        return [node for node in reached if not self.is_identity(node)]

    def in_real_graph(self, node_id: str) -> bool:
        """Whether a real edge from a run's output reaches the node: the hook-free run has it.
        False for an identity wrapper and for a node only a wrapper's zeros reach."""
        return self.rank.get(node_id, len(self.order)) < len(self.order)

    def is_identity(self, node_id: str) -> bool:
        return node_id in self.identities

    def name_of(self, node_id: str) -> str:
        return self.nodes[node_id].name

    def synthetic_name(self, position: Position) -> str:
        """A stable name for a tensor only a built-in layer or a sub-expression made: the op,
        after the nearest named tensor computed from it (`z:mul` for the p * x in sum(p * x));
        `mul#3` (its node's rank) when no named tensor is computed from it. Where that names
        several tensors (the same op at each step of a loop), the one made first keeps it and
        the later ones are `z:mul@2`, `z:mul@3`, ... (see `synthetic_names`)."""
        return self.synthetic_names.get(position) or self._synthetic_base(position)

    def tensor_name(self, position: Position) -> str:
        """A tensor's canonical name in the pass: its own (`canonical_name`), else synthetic."""
        return canonical_name(self.names.get(position, [])) or self.synthetic_name(position)

    @cached_property
    def positions(self) -> frozenset[Position]:
        """Every position of the pass that can carry a gradient: each node's first output,
        every tensor an edge leads to, every named tensor."""
        found = {(node, 0) for node in self.order + self.zero_only} | set(self.consumers)
        return frozenset(found | {position for position in self.names
                                  if position[0] in self.rank})

    @cached_property
    def named_positions(self) -> dict[str, frozenset[Position]]:
        """The positions each canonical name stands for (one each, where names are unique)."""
        found: dict[str, set[Position]] = {}
        for position in self.positions:
            found.setdefault(self.tensor_name(position), set()).add(position)
        return {name: frozenset(places) for name, places in found.items()}

    @cached_property
    def synthetic_names(self) -> dict[Position, str]:
        """Every unnamed position's synthetic name, no two alike and none a tensor's own name.
        Numbered in the order the forward made them, the real graph's positions before those
        only a wrapper's zeros reach, so both passes give a real position the same name."""
        unnamed = {(node, 0) for node in self.order + self.zero_only} | set(self.consumers)
        unnamed -= {position for position, names in self.names.items() if names}
        taken = {name for names in self.names.values() for name in names}
        ordered = sorted(unnamed, key=self.made_order)
        return distinct(((position, self._synthetic_base(position)) for position in ordered),
                         taken)

    def made_order(self, position: Position) -> tuple[bool, int, int, int]:
        """Real positions first, each in the order the forward made its node (a trace saved
        without that order: the farther from the output, the earlier)."""
        node = self.nodes[position[0]]
        made = -1 if node.made is None else node.made
        return (not self.in_real_graph(node.id), made, -self.rank[node.id], position[1])

    def _synthetic_base(self, position: Position) -> str:
        node = self.nodes[position[0]]
        if node.name == ACCUMULATE:
            return f"leaf#{self.rank[node.id]}"
        op = op_name(node.name)
        suffix = f"[{position[1]}]" if position[1] else ""
        seen = {position}
        frontier = [position]
        while frontier:
            current = frontier.pop(0)
            for user, _ in sorted(self.consumers.get(current, []),
                                  key=lambda edge: self.rank[edge[0]]):
                above = (user, 0)
                names = self.names.get(above)
                if names:
                    return f"{canonical_name(names)}:{op}{suffix}"
                if above not in seen:
                    seen.add(above)
                    frontier.append(above)
        return f"{op}#{self.rank[node.id]}{suffix}"

    def record(self, index: int | None) -> TensorRecord | None:
        return None if index is None else self.trace.tensors[index]

    def raw_position(self, index: int | None) -> Position | None:
        record = self.record(index)
        if record is None or record.node is None or record.node not in self.nodes:
            return None
        return (record.node, record.output_nr)

    def resolve(self, position: tuple[str | None, int] | None) -> Position | None:
        """The real position behind a raw one (an edge target, a wrapper output); None when
        there is none (no tensor, or one that does not require grad)."""
        if position is None or position[0] is None:
            return None
        return resolve_through(position[0], position[1], self._edges, self.is_identity)

    def uses(self, position: Position) -> frozenset[Edge]:
        """The real edges a raw position's gradient is the sum of (through wrappers)."""
        known = self.uses_of.get(position)
        if known is not None:
            return known
        found: set[Edge] = set()
        for consumer, number in self.raw_consumers.get(position, []):
            if self.is_identity(consumer):
                found |= self.uses((consumer, number))
            else:
                found.add((consumer, number))
        self.uses_of[position] = frozenset(found)
        return self.uses_of[position]

    def reachable(self, root: Position | None) -> set[str]:
        if root is None:
            return set()
        return set(real_order([root], self._edges, self.is_identity))

    def consumers_within(self, position: Position, reachable: set[str]) -> frozenset[Edge]:
        return frozenset(edge for edge in self.consumers.get(position, [])
                         if edge[0] in reachable)


__all__ = [
    "Edge",
    "GraphView",
    "Position",
    "Signature",
    "real_order",
    "resolve_through",
    "signature",
]
