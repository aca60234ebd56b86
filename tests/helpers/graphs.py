"""A small model written twice, as a spec and in plain PyTorch, and torch's own graph of it: the
oracle side of the graph-view and replay tests (records/graph.py, capture/replay.py)."""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

X = [0.5, -1.0, 2.0]
W = [1.5, 0.25, -0.75]
SEED = [2.0, -0.5, 0.125]

# x is used twice (inside m and after it); m's module hooks wrap its input and output in the
# full pass, so that pass's graph has identity wrappers the view must look through.
SHARED_SPEC = f"""
inputs:
  x: {{value: {X}, requires_grad: true}}
modules:
  m:
    params: {{w: {W}}}
    forward: {{args: [u], steps: ["o = tanh(u) * w"]}}
forward: ["h = m(x)", "s = sum(h * x)"]
backward: s
"""

# The same model, backpropagated from the vector h with a seed gradient.
SEEDED_SPEC = f"""
inputs:
  x: {{value: {X}, requires_grad: true}}
modules:
  m:
    params: {{w: {W}}}
    forward: {{args: [u], steps: ["o = tanh(u) * w"]}}
forward: ["h = m(x)"]
backward: {{of: h, gradient: {SEED}}}
"""

Node = Any  # torch.autograd.graph.Node


def plain_shared() -> dict[str, torch.Tensor]:
    """SHARED_SPEC in plain torch, no hooks: its leaves and named tensors."""
    x = torch.tensor(X, requires_grad=True)
    w = torch.tensor(W, requires_grad=True)
    h = torch.tanh(x) * w
    s = (h * x).sum()
    return {"x": x, "m.w": w, "h": h, "s": s}


def breadth_first(root: torch.Tensor) -> list[Node]:
    """torch's nodes reachable from `root.grad_fn` along next_functions, breadth first."""
    queue: deque[Node] = deque([root.grad_fn])
    order: list[Node] = []
    while queue:
        node = queue.popleft()
        if node in order:
            continue
        order.append(node)
        queue.extend(child for child, _ in node.next_functions if child is not None)
    return order


def accumulate_node(leaf: torch.Tensor) -> Node:
    """The AccumulateGrad node of a leaf, as torch's graph reaches it."""
    return torch.autograd.graph.get_gradient_edge(leaf).node
