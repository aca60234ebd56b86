"""The "firing order" lesson: every hook call of one backward (or autograd.grad) call, numbered,
each with the rule that puts it where it is, and whether the observed order agrees with it.

This module owns the ordering rules (as plain words, see RULES) and the small checks behind
`OrderStep.holds`. It reads trace data only (no torch): a node's turn is found from the graph
the tracer recorded, never from where an event happens to sit, so a trace in the wrong order
shows up as steps that do not hold. The rules are those torch 2.13 was observed to follow
(../shared/reference/torch-hook-facts.md, cases D03, D04, D05, E1 to E3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gradexplain.records.names import ACCUMULATE, HOOK_WRAPPER, canonical_name
from gradexplain.records.trace import (
    Event,
    GraphNode,
    HookKind,
    Mode,
    PassTrace,
    TensorRecord,
)

# --- the rules, in the order the legend lists them ------------------------------------------

BETWEEN_NODES = (
    "a node's turn starts only after every node that feeds it gradient has finished its own "
    "turn, so a later module's hooks run before an earlier module's"
)
TENSOR_FIRST = (
    "tensor hooks on a node's output tensors open the node's turn: they run before its pre-hooks"
)
LEGACY_POST = (
    "a legacy module hook is a Node post-hook the module registered when its call returned: it "
    "runs right after the node computes (inner modules' first), before our own post-hook, "
    "registered after the forward"
)
FULL_PRE_ON_OUTPUT = (
    "a full_backward_pre hook is a post-hook of the wrapper node around the module's outputs "
    f"({HOOK_WRAPPER}): it runs as that node finishes, before our own post-hook"
)
FULL_ON_INPUT = (
    "a full_backward hook is a post-hook of the wrapper node around the module's inputs "
    f"({HOOK_WRAPPER}): it runs once the gradients of the module's inputs are ready"
)
FULL_FROM_OUTPUT = (
    "when none of a module's inputs requires grad there is no input wrapper: its full_backward "
    "hook runs on the output wrapper instead, right after its full_backward_pre hook"
)
NODE_POST_LAST = (
    "Node post-hooks run after the node computed, in registration order; ours was registered "
    "after the forward, so it ends the node's turn, which no other node's hooks interrupt"
)
LEAF_TENSOR_FIRST = (
    "a leaf's tensor hook opens its AccumulateGrad turn, before .grad is written"
)
LEAF_CAPTURED = (
    "under autograd.grad a leaf's gradient is handed back, not accumulated: its tensor hook "
    "runs, AccumulateGrad and post_accumulate_grad do not"
)
LEAF_PRE = (
    "AccumulateGrad's pre-hook runs after the leaf's tensor hook, before .grad is written"
)
POST_ACCUMULATE = (
    "post_accumulate_grad runs once .grad is written: after AccumulateGrad's pre-hook, before "
    "its post-hook"
)
LEAF_POST_LAST = (
    "AccumulateGrad's post-hook ends the leaf's turn, after post_accumulate_grad; no other "
    "node's hooks interrupt the turn"
)
RECOMPUTED = (
    "a forward run inside the backward (torch.utils.checkpoint recomputing what it did not "
    "save, as a node unpacks its saved tensors) fires its forward hooks within the turn of the "
    "node that needed it"
)
GLOBAL_FIRST = (
    "global module hooks run before local ones of the same kind (not exercised here: "
    "gradexplain registers no global module hooks)"
)

RULES: tuple[str, ...] = (
    BETWEEN_NODES,
    TENSOR_FIRST,
    LEGACY_POST,
    FULL_PRE_ON_OUTPUT,
    FULL_ON_INPUT,
    FULL_FROM_OUTPUT,
    NODE_POST_LAST,
    LEAF_TENSOR_FIRST,
    LEAF_CAPTURED,
    LEAF_PRE,
    POST_ACCUMULATE,
    LEAF_POST_LAST,
    RECOMPUTED,
    GLOBAL_FIRST,
)


_FORWARD = ("forward_pre", "forward")


@dataclass(frozen=True)
class OrderStep:
    """One hook call in one backward or grad call, with the rule behind its position."""

    position: int  # 1-based position in this run's timeline
    seq: int  # Event.seq
    hook: HookKind
    target: str  # Event.target ("" is the top-level model)
    node: str | None  # Event.node
    group: str  # whose turn it belongs to: "n3 SigmoidBackward0", "leaf x (n8)"
    rule: str  # one of RULES
    holds: bool  # whether the observed order agrees with `rule`


@dataclass(frozen=True)
class FiringOrder:
    """Every hook call of one backward or grad call of a pass, in firing order."""

    mode: Mode
    run: int
    steps: tuple[OrderStep, ...]
    rules: tuple[str, ...]  # the legend: every rule used, once, in RULES order

    @property
    def out_of_order(self) -> tuple[OrderStep, ...]:
        return tuple(step for step in self.steps if not step.holds)


def firing_order(trace: PassTrace, run: int = 1) -> FiringOrder | None:
    """All hook calls of one backward/grad call of a pass (Event.run == run), numbered, each with
    the rule behind its position; None if that run has no events."""
    if run < 1:
        raise ValueError(f"run {run}: runs are numbered from 1 (run 0 is the forward)")
    # The rules are those of gradexplain's own hooks; the user's own calls are left out.
    events = sorted((event for event in trace.events if event.run == run and event.user is None),
                    key=lambda event: event.seq)
    if not events:
        return None
    timeline = _Timeline(trace, run, events)
    steps = tuple(
        OrderStep(position + 1, event.seq, event.hook, event.target, event.node,
                  timeline.label(position), *timeline.rule(position))
        for position, event in enumerate(events)
    )
    used = {step.rule for step in steps}
    legend = tuple(rule for rule in RULES if rule in used or rule == GLOBAL_FIRST)
    return FiringOrder(trace.mode, run, steps, legend)


class _Timeline:
    """One run's events with each one's turn (the graph node id whose turn it is), and the
    checks. Positions are indexes into the run's events, in firing order."""

    def __init__(self, trace: PassTrace, run: int, events: Sequence[Event]) -> None:
        self.trace = trace
        self.events = events
        self.nodes: dict[str, GraphNode] = {node.id: node for node in trace.graph}
        self.feeders: dict[str, list[str]] = {}
        for node in trace.graph:
            for child, _ in node.next:
                if child is not None:
                    self.feeders.setdefault(child, []).append(node.id)
        self.is_grad_call = any(item.index == run and item.kind == "grad" for item in trace.runs)
        self.turns: list[str | None] = [self._turn_of(event) for event in events]
        for position, event in enumerate(events):
            if event.hook in _FORWARD and position and self.turns[position] is None:
                # A forward run inside the backward runs in the turn of the node it interrupts.
                self.turns[position] = self.turns[position - 1]
        self.members: dict[str, list[int]] = {}
        for position, turn in enumerate(self.turns):
            if turn is not None:
                self.members.setdefault(turn, []).append(position)

    # --- whose turn ------------------------------------------------------------------------

    def _turn_of(self, event: Event) -> str | None:
        """The node whose turn the event is part of: the node itself for node and module backward
        hooks; a non-leaf's grad_fn for its tensor hook; a leaf's AccumulateGrad for the leaf's
        tensor and post-accumulate hooks (a leaf has no grad_fn, hence the record lookup)."""
        if event.hook in ("tensor", "post_accumulate_grad") and event.node is None:
            leaf = self._leaf(event)
            return None if leaf is None else leaf.node
        return event.node_id

    def _leaf(self, event: Event) -> TensorRecord | None:
        for arg in event.args:
            if arg.tensor is not None and arg.tensor < len(self.trace.tensors):
                record = self.trace.tensors[arg.tensor]
                if record.is_leaf:
                    return record
        named = self.trace.named(event.target)
        return named if named is not None and named.is_leaf else None

    def is_leaf_turn(self, turn: str | None) -> bool:
        node = None if turn is None else self.nodes.get(turn)
        return node is not None and (node.name == ACCUMULATE or node.variable is not None)

    def label(self, position: int) -> str:
        turn = self.turns[position]
        if turn is None:
            return "unknown node"
        node = self.nodes.get(turn)
        if node is None:
            return turn
        if self.is_leaf_turn(turn):
            names = () if node.variable is None else self.trace.tensors[node.variable].names
            return f"leaf {canonical_name(names) or '?'} ({turn})"
        return f"{turn} {node.name}"

    # --- the rule of each step, and its check ---------------------------------------------

    def rule(self, position: int) -> tuple[str, bool]:
        event = self.events[position]
        turn = self.turns[position]
        if event.hook in _FORWARD:
            return RECOMPUTED, turn is not None
        leaf = self.is_leaf_turn(turn)
        check: Callable[[int], bool]
        if event.hook == "tensor" and leaf and self.is_grad_call:
            rule, check = LEAF_CAPTURED, self._captured
        elif event.hook == "tensor":
            rule, check = (LEAF_TENSOR_FIRST if leaf else TENSOR_FIRST), self._tensor_first
        elif event.hook == "node_pre":
            rule, check = (LEAF_PRE, self._leaf_pre) if leaf else (
                BETWEEN_NODES, self._after_feeders)
        elif event.hook == "node":
            rule, check = (LEAF_POST_LAST if leaf else NODE_POST_LAST), self._ends_turn
        elif event.hook == "post_accumulate_grad":
            rule, check = POST_ACCUMULATE, self._post_accumulate
        elif event.hook == "backward":
            rule, check = LEGACY_POST, self._legacy
        elif event.hook == "full_backward_pre":
            rule, check = FULL_PRE_ON_OUTPUT, self._full_pre
        elif not self._on_input_wrapper(event):
            rule, check = FULL_FROM_OUTPUT, self._full_from_output
        else:
            rule, check = FULL_ON_INPUT, self._full_on_input
        return rule, turn is not None and check(position)

    def _same_turn(self, position: int, *hooks: HookKind) -> list[int]:
        """Other positions of the same turn, of the given hook kinds (any kind if none given)."""
        turn = self.turns[position]
        assert turn is not None
        return [other for other in self.members[turn] if other != position
                and (not hooks or self.events[other].hook in hooks)]

    def _tensor_first(self, position: int) -> bool:
        # Only other tensor hooks may come before it in its turn (a node with several outputs).
        return all(self.events[other].hook == "tensor"
                   for other in self._same_turn(position) if other < position)

    def _captured(self, position: int) -> bool:
        return not self._same_turn(position, "node_pre", "node", "post_accumulate_grad")

    def _after_feeders(self, position: int) -> bool:
        """Every node with an edge to this one that ran in this run finished its turn before
        this turn's first step (a tensor hook, if the node's outputs have one)."""
        turn = self.turns[position]
        assert turn is not None
        start = self.members[turn][0]
        return all(other < start
                   for feeder in self.feeders.get(turn, [])
                   for other in self.members.get(feeder, []))

    def _leaf_pre(self, position: int) -> bool:
        return (all(other < position for other in self._same_turn(position, "tensor"))
                and all(other > position for other in
                        self._same_turn(position, "post_accumulate_grad", "node")))

    def _post_accumulate(self, position: int) -> bool:
        return (all(other < position for other in self._same_turn(position, "tensor", "node_pre"))
                and all(other > position for other in self._same_turn(position, "node")))

    def _ends_turn(self, position: int) -> bool:
        """Last of its turn, and the turn's steps sit side by side in the timeline."""
        turn = self.turns[position]
        assert turn is not None
        steps = self.members[turn]
        return steps[-1] == position and steps[-1] - steps[0] + 1 == len(steps)

    def _legacy(self, position: int) -> bool:
        """Right after the node ran: the step before is the node's pre-hook or another legacy
        hook on the node, of a module whose call returned earlier (it registered first)."""
        previous = position - 1
        while previous >= 0 and self.events[previous].hook in _FORWARD:
            previous -= 1  # a forward the node's unpacking ran (checkpoint) lies between
        if previous < 0 or self.turns[previous] != self.turns[position]:
            return False
        before = self.events[previous]
        if before.hook == "node_pre":
            return True
        if before.hook != "backward":
            return False
        earlier = self._call_index(before.target, self.turns[position])
        this = self._call_index(self.events[position].target, self.turns[position])
        return earlier is None or this is None or earlier < this

    def _call_index(self, module: str, node: str | None) -> int | None:
        return next((index for index, call in enumerate(self.trace.calls)
                     if call.module == module and call.legacy_node == node), None)

    def _inside_node(self, position: int) -> bool:
        """After the node's pre-hook and before our post-hook: the node's own post-hooks."""
        return (all(other < position for other in self._same_turn(position, "node_pre"))
                and all(other > position for other in self._same_turn(position, "node")))

    def _is_wrapper(self, turn: str | None) -> bool:
        node = None if turn is None else self.nodes.get(turn)
        return node is not None and node.name == HOOK_WRAPPER

    def _wraps_outputs_of(self, turn: str | None, module: str) -> bool:
        """The wrapper's edges lead to the nodes that made the module's outputs (the forward hook
        saw the outputs before they were wrapped, so ModuleCall.legacy_node is their node)."""
        node = None if turn is None else self.nodes.get(turn)
        if node is None:
            return False
        made = {call.legacy_node for call in self.trace.calls
                if call.module == module and call.legacy_node is not None}
        return not made or any(child in made for child, _ in node.next)

    def _full_pre(self, position: int) -> bool:
        turn = self.turns[position]
        return (self._is_wrapper(turn) and self._inside_node(position)
                and self._wraps_outputs_of(turn, self.events[position].target))

    def _full_on_input(self, position: int) -> bool:
        """On the node the module's wrapped inputs were made by (forward saw the wrapped ones)."""
        turn = self.turns[position]
        module = self.events[position].target
        input_nodes = {self.trace.tensors[index].node for call in self.trace.calls
                       if call.module == module for index in call.inputs
                       if index is not None and index < len(self.trace.tensors)}
        return self._is_wrapper(turn) and self._inside_node(position) and turn in input_nodes

    def _full_from_output(self, position: int) -> bool:
        event = self.events[position]
        before = self.events[position - 1] if position else None
        return (self._is_wrapper(self.turns[position]) and self._inside_node(position)
                and before is not None and before.hook == "full_backward_pre"
                and before.target == event.target
                and self.turns[position - 1] == self.turns[position])

    def _on_input_wrapper(self, event: Event) -> bool:
        """Whether a full backward hook fired on the wrapper around its call's inputs, which a
        call has only where an input requires grad; else it fired from the output wrapper.
        Asked of the node it fired on, so that each call of a module is read on its own (one
        call's input may require grad and another's not)."""
        inputs = {self.trace.tensors[index].node for call in self.trace.calls
                  if call.module == event.target for index in call.inputs
                  if index is not None and index < len(self.trace.tensors)
                  and self.trace.tensors[index].requires_grad}
        return event.node_id in inputs if event.node_id is not None else bool(inputs)




def first_firing_order(trace: PassTrace) -> FiringOrder | None:
    """The firing order of the pass's first call that made any hook call (a call torch refused
    at once makes none)."""
    for run in trace.runs:
        order = firing_order(trace, run.index)
        if order is not None:
            return order
    return None


def first_firing_orders(traces: Iterable[PassTrace]) -> list[FiringOrder]:
    """Each pass's first firing order, in the order of `traces`; a pass none of whose calls
    made a hook call has none."""
    return [order for order in map(first_firing_order, traces) if order is not None]


__all__ = ["RULES", "FiringOrder", "OrderStep", "firing_order", "first_firing_order",
           "first_firing_orders"]
