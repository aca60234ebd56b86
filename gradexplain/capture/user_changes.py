"""Which recorded gradients the user's own hooks changed, read from the graph. No torch here.

A user's backward hook may return a replacement (or edit a gradient in place): from then on, in
that backward call, what flows below the place it replaced is no longer the derivative its label
names, and the hook-free check run (which computes true derivatives) cannot confirm it. Such a
value keeps its label, marked `modified` with the hook that changed it, and is not checked: it
is never shown as a derivative it is not, nor as a failure of the labelling.

A value is changed when it was recorded after the user's hook replaced something (a later event
of the same call) and it lies at or below the replaced place in the graph:

- a tensor hook replaces its tensor's whole gradient: that node and every node below it (a
  tensor the pass never named: the node that made it);
- a legacy module hook replaces the `grad_input` of the node it sits on: that node's edges, and
  every node below them;
- a full backward hook (or full pre-hook) replaces what its identity wrapper passes on: the
  nodes below the wrapper. The wrapper looks through to the same real position above and
  below it, so what arrives at the wrapper (its Node hooks' `grad_outputs`) is told apart by
  the node: it is not changed;
- a post-accumulate-grad hook that edits `.grad` in place changes that leaf's `.grad`, and what
  the leaf's AccumulateGrad node post-hook is handed after it: torch runs post-accumulate
  hooks inside that node, before its post-hooks, and a first gradient becomes `.grad` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradexplain.records.graph import Edge, GraphView, Position
from gradexplain.records.names import canonical_name
from gradexplain.records.trace import Event, PassTrace
from gradexplain.records.walk import Meaning


@dataclass(frozen=True)
class Change:
    """One replacement by one of the user's hooks: what it reached."""

    seq: int
    run: int
    function: str
    nodes: frozenset[str]  # nodes whose output gradient is changed
    edges: frozenset[Edge]  # shares it replaced directly (a legacy hook's grad_input)
    leaves: frozenset[str]  # leaves whose `.grad` it edited in place
    wrapper: str | None = None  # a full hook's identity wrapper node: what arrives is unchanged


class Changes:
    """Every replacement the user's hooks made in one pass, and what each one reached."""

    def __init__(self, trace: PassTrace, view: GraphView) -> None:
        self.trace = trace
        self.view = view
        self.all = [self.change(event) for event in trace.events
                    if event.user is not None and event.changed and event.phase == "backward"]

    def __bool__(self) -> bool:
        return bool(self.all)

    def change(self, event: Event) -> Change:
        assert event.user is not None
        starts: set[str] = set()
        edges: set[Edge] = set()
        leaves: set[str] = set()
        node = event.node_id
        if event.hook == "post_accumulate_grad":
            leaves.add(event.target)
        elif event.hook == "tensor":
            record = self.trace.named(event.target)
            raw = self.view.raw_position(record.index if record else None)
            if raw is None and node is not None and node in self.view.nodes:
                # A tensor the pass never named (the model hooked it as it ran): the node
                # that made it, whose every output's gradient is then taken as changed.
                raw = (node, 0)
            position = self.view.resolve(raw)
            if position is not None:
                starts.add(position[0])
        elif node is not None and node in self.view.nodes:
            for number, target in enumerate(self.view.nodes[node].next):
                if event.hook == "backward":
                    edges.add((node, number))
                below = self.view.resolve(target)
                if below is not None:
                    starts.add(below[0])
        reached: set[str] = set()
        for start in starts:
            reached |= self.view.reachable((start, 0))
        # A full hook replaces what leaves its wrapper; a tensor hook on a wrapper's output
        # (a module's argument, hooked in its forward) what arrives at it.
        wrapper = node if event.hook != "tensor" and node is not None \
            and node in self.view.nodes and self.view.is_identity(node) else None
        return Change(event.seq, event.run, event.user, frozenset(reached), frozenset(edges),
                      frozenset(leaves), wrapper)

    def earlier(self, seq: int, runs: tuple[int, ...]) -> list[Change]:
        return [change for change in self.all if change.seq < seq and change.run in runs]

    def of_claim(self, event: Event, arg: str, meaning: Meaning, run: int,
                 located: tuple[Position, list[Edge] | None] | None) -> str | None:
        """The user's hook that changed argument `arg`, if one did. `located` is where the
        argument's claim flows in the graph (the position, and only these edges if given)."""
        if meaning.kind == "zero":
            return None
        for change in self.earlier(event.seq, meaning.runs or (run,)):
            if (change.wrapper is not None and event.node_id == change.wrapper
                    and event.hook in ("node_pre", "node") and arg.startswith("grad_outputs")):
                continue  # what arrives at the wrapper whose hook replaced what leaves it
            if event.hook == "post_accumulate_grad" and event.target in change.leaves:
                return change.function
            if (event.hook == "node" and arg.startswith("grad_outputs")
                    and self.accumulated_leaf(event.node_id) in change.leaves):
                return change.function
            if located is None:
                continue
            position, edges = located
            if edges is None:
                if position[0] in change.nodes:
                    return change.function
                continue
            for consumer, number in edges:
                if consumer in change.nodes or (consumer, number) in change.edges:
                    return change.function
        return None

    def accumulated_leaf(self, node: str | None) -> str | None:
        """The name of the leaf an AccumulateGrad node writes `.grad` of (None: another node)."""
        found = None if node is None else self.view.nodes.get(node)
        if found is None or found.variable is None:
            return None
        return canonical_name(self.trace.tensors[found.variable].names)

    def of_leaf(self, name: str, runs: tuple[int, ...]) -> str | None:
        """The user's hook that changed the `.grad` of leaf `name` in one of `runs`."""
        record = self.trace.named(name)
        position = self.view.resolve(self.view.raw_position(record.index if record else None))
        for change in self.all:
            if change.run not in runs:
                continue
            if name in change.leaves or (position is not None and position[0] in change.nodes):
                return change.function
        return None

    def of_edge(self, run: int, node: str, number: int | None) -> str | None:
        """The user's hook that changed what node `node` passes on along edge `number` (None:
        what arrives at it) in call `run`; for the chain rule, which reads node hooks."""
        for change in self.all:
            if change.run != run:
                continue
            if node in change.nodes or (number is not None and (node, number) in change.edges):
                return change.function
        return None


__all__ = ["Change", "Changes"]
