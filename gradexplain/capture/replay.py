"""The independent computation every label is checked against: a hook-free run of an identical
build, and `torch.autograd.grad` of the same output with the same seed gradient.

For each backward or grad call it computes, with no hook registered anywhere:
- the whole gradient at every position of the graph (autograd.grad with GradientEdge inputs,
  which also reaches tensors only a built-in layer made, like Linear's transposed weight);
- each edge's share: the node's own backward applied to its output's gradient (a tensor used
  twice gets one share per use).
Positions are matched to the traced graph by the breadth-first order of `records.graph`.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction
from torch.autograd.graph import GradientEdge

from gradexplain.capture.build import Builder, Built, build, make_tensor, observe
from gradexplain.capture.remembered import keep
from gradexplain.capture.user_hooks import user_hooks
from gradexplain.capture.values import grad_outputs
from gradexplain.errors import GradexplainError
from gradexplain.language.model import ModelSpec
from gradexplain.records.graph import Signature, breadth_first, real_order, signature
from gradexplain.records.names import ACCUMULATE, IDENTITY_NODES
from gradexplain.records.trace import PassTrace

Node = Any  # torch.autograd.graph.Node
Ranked = tuple[int, int]


class ReplayMismatch(GradexplainError):
    """The hook-free run built another graph than the traced one: nothing could be checked."""


@dataclass(frozen=True)
class RunValues:
    """One backward or grad call replayed: gradients by position, and each edge's share."""

    of: str
    seed: torch.Tensor | None
    totals: dict[Ranked, torch.Tensor | None]
    edges: dict[Ranked, torch.Tensor | None]


class Replay:
    """The hook-free run of a spec and what every call of the traced pass computes in it."""

    def __init__(self, spec: ModelSpec, trace: PassTrace, traced: Signature,
                 make: Builder | None = None, wrapped: frozenset[str] | None = None) -> None:
        """`wrapped`: the modules whose forward the traced pass ran with full backward hooks.
        Those hooks pass each tensor argument on as a new tensor (a view), which can change
        what a forward computes (`query is key` in nn.MultiheadAttention): the check run then
        registers hooks that do nothing on the same modules, so that its graph is the pass's."""
        self.spec = spec
        built = make() if make is not None else build(spec)
        # A Python model's own backward hooks are off here (its forward hooks stay: they are
        # part of what it computes), so what is checked is the true derivative.
        with user_hooks(built.model, "replay", None):
            self._run(trace, traced, built, wrapped)

    def _run(self, trace: PassTrace, traced: Signature, built: Built,
             wrapped: frozenset[str] | None) -> None:
        named: dict[str, torch.Tensor] = {}

        def remember(name: str, value: Any) -> None:
            if isinstance(value, torch.Tensor):
                named.setdefault(name, value)

        with ExitStack() as hooks, observe(remember):
            for path, module in built.model.named_modules():
                if wrapped is not None and path in wrapped:
                    hooks.enter_context(module.register_full_backward_hook(_no_op))
            returned = built.forward()
        named.update({name: value for name, value in returned.items()
                      if isinstance(value, torch.Tensor)})
        named.update(built.leaves())
        self.named = named
        # Every call's root orders the graph as the traced pass did. A call torch refused in
        # the traced pass (a second backward without retain_graph) may still run here, where
        # nothing is freed: the gradients it saw before the error are checked against that.
        roots = [_position(named[run.of]) for run in trace.runs]
        self.order: list[Node] = real_order(roots, _next, _is_wrapper)
        if self.signature() != traced:
            raise ReplayMismatch(
                f"the check run built another autograd graph ({len(self.order)} nodes) than "
                f"the traced {trace.mode} pass ({len(traced)} nodes), so no label of it could "
                "be checked")
        self.rank = {node: index for index, node in enumerate(self.order)}
        self.uses = _uses(roots)
        self.runs: dict[int, RunValues] = {}
        # Nodes whose own backward could not be run again here (a custom Function's backward
        # raised), by rank: why their edges' shares have no hook-free value.
        self.unreplayed: dict[int, str] = {}
        cache: dict[tuple[str, str, int], RunValues] = {}
        for run in trace.runs:
            key = (run.kind, run.of, run.call)
            if key not in cache:
                try:
                    cache[key] = self.compute(run.of, self.seed(run.kind, run.of, run.call))
                except RuntimeError:
                    # torch refused this call here too (no graph, a non-scalar without a
                    # seed): the traced call saw no gradient that could be checked.
                    if not run.failed:
                        raise
                    continue
            self.runs[run.index] = cache[key]

    def signature(self) -> Signature:
        return signature(self.order, lambda node: str(node.name()), _next, _is_wrapper)

    def seed(self, kind: str, of: str, call: int) -> torch.Tensor | None:
        """The seed gradient of the spec's `call`-th backward or grad call, made again here."""
        if kind == "backward":
            gradient = self.spec.backwards[call].gradient
            return None if gradient is None else make_tensor(gradient)
        spec = self.spec.grads[call].grad_outputs
        return None if spec is None else grad_outputs(spec, self.named[of])

    def compute(self, of: str, seed: torch.Tensor | None) -> RunValues:
        root = self.named[of]
        positions = [(node, number) for node in self.order
                     for number in range(len(node._input_metadata))]
        grads = torch.autograd.grad(
            root, [GradientEdge(node, number) for node, number in positions], seed,
            retain_graph=True, allow_unused=True)
        totals: dict[Ranked, torch.Tensor | None] = {(self.rank[node], number): grad
                  for (node, number), grad in zip(positions, grads, strict=True)}
        edges: dict[Ranked, torch.Tensor | None] = {}
        with torch.no_grad():
            for node in self.order:
                rank = self.rank[node]
                incoming = [totals[(rank, number)] for number in
                            range(len(node._input_metadata))]
                if node.name() == ACCUMULATE or all(grad is None for grad in incoming):
                    continue
                passed_on = self.passed_on(node, totals)
                if passed_on is not None:
                    edges.update(((rank, number), share) for number, share in
                                 enumerate(passed_on))
                    continue
                filled = [grad if grad is not None else torch.zeros(
                    meta.shape, dtype=meta.dtype) for grad, meta in
                          zip(incoming, node._input_metadata, strict=True)]
                try:
                    shares = _apply(node, filled)
                except Exception as error:
                    if not isinstance(node, BackwardCFunction):
                        raise
                    # The user's own backward, called a second time on the same ctx: one
                    # that counts its calls or frees what it saved may refuse.
                    self.unreplayed[rank] = (
                        f"the backward of {type(node).__name__} (a custom autograd.Function) "
                        f"failed when called again on its own ({type(error).__name__}), so its "
                        "shares have no hook-free value to compare")
                    continue
                for number, (share, (child, output)) in enumerate(
                        zip(shares, node.next_functions, strict=False)):
                    edges[(rank, number)] = _as_engine_does(share, child, output)
        # Nothing changes these from here on: the checks and the chain rule take what they
        # compute from each once (`remembered.keep`).
        keep((*totals.values(), *edges.values()))
        return RunValues(of, seed, totals, edges)

    def passed_on(self, node: Node, totals: dict[Ranked, torch.Tensor | None]
                  ) -> list[torch.Tensor | None] | None:
        """A node's shares without running its backward again on its own, where that is sure
        to give what running it gives:
        - an edge that is its tensor's only use: the share is that tensor's whole gradient,
          read from what the engine passed on (the engine sums shares, and reduces a broadcast
          one to its input's shape, as `_as_engine_does`);
        - an edge to a tensor with other uses, where the node's other edges lead only to
          leaves (a convolution's or a Linear's weight and bias, through views): the engine
          run again from this node to that tensor alone (`torch.autograd.grad` between
          GradientEdges), which computes the node's backward for that edge only (a
          convolution's input gradient without its weight gradient).
        None otherwise (a wrapper's edge, a custom Function's node, an edge whose tensor the
        node reaches another way too): the node's backward is then run again (`_apply`)."""
        if isinstance(node, BackwardCFunction):
            return None
        shares: list[torch.Tensor | None] = []
        shared: list[int] = []  # the edges to tensors with other uses
        for number, (child, output) in enumerate(node.next_functions):
            rank = None if child is None else self.rank.get(child)
            if child is None:
                shares.append(None)
            elif rank is None:
                return None
            elif self.uses.get((child, output), 0) == 1:
                shares.append(totals.get((rank, output)))
            else:
                shares.append(None)
                shared.append(number)
        if shared:
            found = self.engine_shares(node, shared, totals)
            if found is None:
                return None
            for number, share in zip(shared, found, strict=True):
                shares[number] = share
        return shares

    def engine_shares(self, node: Node, shared: list[int],
                      totals: dict[Ranked, torch.Tensor | None]
                      ) -> tuple[torch.Tensor | None, ...] | None:
        """The shares of the edges `shared`, by the engine from this node alone, where each
        reaches its tensor only along its own edge: every other edge leads to nothing, or along
        one chain of one-edge nodes to a leaf, that tensor nowhere on it (else None: the engine
        would add what reaches the tensor another way, as in `x * x`, `e + exp(e)` or a
        recurrent cell whose edges meet below)."""
        edges = node.next_functions
        targets = [edges[number] for number in shared]
        for number, (child, _) in enumerate(edges):
            if child is None:
                continue
            below = _chain_to_leaf(child)
            for target_number, (target, _) in zip(shared, targets, strict=True):
                if number != target_number and (
                        below is None or any(item is target for item in below)):
                    return None
        rank = self.rank[node]
        seeded = [(GradientEdge(node, number), totals[(rank, number)])
                  for number in range(len(node._input_metadata))
                  if totals.get((rank, number)) is not None]
        try:
            found: tuple[torch.Tensor | None, ...] = torch.autograd.grad(
                [edge for edge, _ in seeded], [GradientEdge(child, output) for child, output
                                               in targets],
                [grad for _, grad in seeded], retain_graph=True, allow_unused=True)
        except RuntimeError:
            return None  # the node run again on its own instead, as for any other
        return found

    def position_shape(self, position: Ranked) -> tuple[int, ...]:
        node = self.order[position[0]]
        return tuple(node._input_metadata[position[1]].shape)


def _apply(node: Node, grads: list[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
    """The node's backward on `grads`, one share per next_functions edge. A custom
    `torch.autograd.Function`'s node is no callable C++ node: its `apply` runs the user's
    backward, which returns one gradient per forward argument (None for a non-tensor);
    the engine keeps those of the tensor arguments, the edges. An argument that needs a
    gradient is exactly an edge to a node, so those two line up in order."""
    if not isinstance(node, BackwardCFunction):
        shares = node(*grads)
        return tuple(shares) if isinstance(shares, (tuple, list)) else (shares,)
    custom: Any = node  # torch leaves BackwardCFunction.apply untyped
    returned = custom.apply(*grads)
    returned = tuple(returned) if isinstance(returned, (tuple, list)) else (returned,)
    needed = [share for share, needs in zip(returned, node.needs_input_grad, strict=False)
              if needs]
    found = iter(needed)
    return tuple(None if child is None else next(found, None)
                 for child, _ in node.next_functions)


def _as_engine_does(share: torch.Tensor | None, child: Node | None,
                    output: int) -> torch.Tensor | None:
    """A node called directly returns its shares unreduced; the engine sums each over the
    dimensions its input was broadcast along. Do the same, so a share has its input's shape."""
    if share is None or child is None:
        return None
    shape = tuple(child._input_metadata[output].shape)
    return share if tuple(share.shape) == shape else share.sum_to_size(shape)


# The longest chain of one-edge nodes (a view such as TBackward, a unary op) looked down for a
# leaf.
_CHAIN = 4


def _chain_to_leaf(node: Node) -> list[Node] | None:
    """Every node a node leads to, where that is one chain of one-edge nodes ending at a leaf's
    AccumulateGrad (a Linear's weight through its TBackward): the nodes, the leaf last; None
    where it leads anywhere else."""
    chain = [node]
    for _ in range(_CHAIN):
        if node.name() == ACCUMULATE:
            return chain
        following = [child for child, _ in node.next_functions if child is not None]
        if len(node.next_functions) != 1 or len(following) != 1:
            return None
        node = following[0]
        chain.append(node)
    return chain if node.name() == ACCUMULATE else None


def _uses(roots: list[tuple[Node | None, int]]) -> dict[tuple[Node, int], int]:
    """How many edges of the graph below `roots` lead into each (node, output): every node
    reachable counted, wrappers too (what reaches a tensor through a wrapper is a use)."""
    uses: dict[tuple[Node, int], int] = {}
    reached = breadth_first((node for node, _ in roots if node is not None),
                            lambda node: [child for child, _ in node.next_functions
                                          if child is not None])
    for node in reached:
        for child, output in node.next_functions:
            if child is not None:
                uses[(child, output)] = uses.get((child, output), 0) + 1
    return uses


def _no_op(module: Any, grad_input: Any, grad_output: Any) -> None:
    """A full backward hook that changes nothing: it only makes torch wrap the module."""


def _is_wrapper(node: Node) -> bool:
    return node.name() in IDENTITY_NODES


def _next(node: Node) -> tuple[tuple[Node | None, int], ...]:
    return tuple(node.next_functions)


def _position(tensor: torch.Tensor) -> tuple[Node | None, int]:
    if tensor.grad_fn is not None:
        return tensor.grad_fn, tensor.output_nr
    if tensor.requires_grad:
        return torch.autograd.graph.get_gradient_edge(tensor).node, 0
    return None, 0


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


__all__ = ["Replay", "ReplayMismatch", "RunValues"]
