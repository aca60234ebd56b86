"""Spec texts that more than one test file reads, and the flow-YAML writer of their numbers."""

from __future__ import annotations

import json
from typing import Any


def flow(value: Any) -> str:
    """A Python list or number as YAML flow text (JSON is valid YAML)."""
    return json.dumps(value)


# Modules nested three deep (tests/language/test_features.py, tests/render/test_mermaid.py).
NESTED = """
inputs:
  x: {value: [1.0, -2.0, 3.0], requires_grad: true}
modules:
  outer:
    params: {a: [2.0, 2.0, 2.0]}
    modules:
      middle:
        params: {b: [0.5, 0.5, 0.5]}
        modules:
          inner:
            layers: {act: Tanh}
            forward: {args: [u], steps: ["v = act(u)"]}
        forward: {args: [h], steps: ["w = inner(h * b)"]}
    forward: {args: [x], steps: ["o = middle(x) * a"]}
forward: ["y = outer(x)", "s = sum(y)"]
backward: s
"""


# A layer and a module each called twice (B09 of the hook facts; the label and diff tests).
TWICE: dict[str, Any] = {
    "x": [[1.0, 2.0], [0.5, -1.0], [2.0, 0.3]], "v": [0.4, -0.8, 1.2],
    "c": [[0.5, 0.74], [0.98, 1.22], [1.46, 1.7]], "d": [0.3, -1.1, 0.8],
    "lin.weight": [[0.3, -0.2], [0.8, 0.5]], "lin.bias": [0.1, -0.3], "blk.w": [1.5, -0.5, 2.0],
}
TWICE_SPEC = f"""
inputs:
  x: {{value: {flow(TWICE["x"])}, requires_grad: true}}
  v: {{value: {flow(TWICE["v"])}, requires_grad: true}}
  c: {flow(TWICE["c"])}
  d: {flow(TWICE["d"])}
layers:
  lin: {{Linear: {{in_features: 2, out_features: 2}}, weight: {flow(TWICE["lin.weight"])},
        bias: {flow(TWICE["lin.bias"])}}}
modules:
  blk:
    params: {{w: {flow(TWICE["blk.w"])}}}
    forward: {{args: [h], steps: ["g = tanh(h)", "o = g * w"]}}
forward: ["h1 = lin(x)", "h2 = lin(h1)", "y1 = blk(v)", "y2 = blk(y1)",
          "s = sum(h2 * c) + sum(y2 * d)"]
backward: s
"""
