"""The cases of tests/capture/test_label_cases.py: one small inline spec per case family of
../shared/reference/torch-hook-facts.md, and plain PyTorch's answer for each.

Families: operand order of the last op (A1, B08); None entries for Python scalars and inputs that
do not require grad (B01, B06, B07); nn.Linear's AddmmBackward0 and its MmBackward0 /
SqueezeBackward4 / ViewBackward0 / UnsafeViewBackward0 variants (B08); broadcasting; zeros for
non-requiring inputs in full hooks (B06); tuple outputs (B02); nested modules sharing a last node
(B10); a module called twice (B09).

The spec texts are written from the same Python numbers the oracles (`plain_*`) use; CASES pairs
each spec with its oracle, by case name.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from tests.helpers.spectexts import TWICE, TWICE_SPEC, flow

Tensors = dict[str, torch.Tensor]


@dataclass
class Plain:
    """Plain torch's answer for one case: d(s)/d(name) for named tensors, per-use contributions
    (`contrib`), and each leaf's final `.grad`."""

    named: Tensors
    grads: dict[str, torch.Tensor | None]
    contrib: Tensors = field(default_factory=dict)


def leaf(values: Any) -> torch.Tensor:
    return torch.tensor(values, requires_grad=True)


def const(values: Any) -> torch.Tensor:
    return torch.tensor(values)


def grads_of(output: torch.Tensor, tensors: Tensors) -> Tensors:
    names = list(tensors)
    found = torch.autograd.grad(output, [tensors[name] for name in names], retain_graph=True)
    return dict(zip(names, found, strict=True))


def final_grads(output: torch.Tensor, leaves: dict[str, torch.Tensor]
                ) -> dict[str, torch.Tensor | None]:
    output.backward(retain_graph=True)
    return {name: tensor.grad if tensor.requires_grad else None
            for name, tensor in leaves.items()}


C3 = [0.5, 1.1, 1.7]

# --- operand order (A1, B08) --------------------------------------------------------------------

ORDER: dict[str, Any] = {
    "x": [0.5, -1.5, 2.0], "u": [1.0, 0.25, -0.5], "a": [0.3, -0.6, 1.4], "b": [2.0, 0.7, -1.1],
    "c": C3, "px.p": [3.0, 4.0, -2.0], "xp.p": [-1.0, 0.5, 2.5],
}
ORDER_SPEC = f"""
inputs:
  x: {{value: {flow(ORDER["x"])}, requires_grad: true}}
  u: {{value: {flow(ORDER["u"])}, requires_grad: true}}
  a: {{value: {flow(ORDER["a"])}, requires_grad: true}}
  b: {{value: {flow(ORDER["b"])}, requires_grad: true}}
  c: {flow(ORDER["c"])}
modules:
  px:
    params: {{p: {flow(ORDER["px.p"])}}}
    forward: {{args: [h], steps: ["y = p * h"]}}
  xp:
    params: {{p: {flow(ORDER["xp.p"])}}}
    forward: {{args: [h], steps: ["y = h * p"]}}
  ba:
    forward: {{args: [a, b], steps: ["o = b * a"]}}
forward: ["y = px(x)", "w = xp(u)", "o = ba(a, b)",
          "s = sum(y * c) + sum(w * c) + sum(o * c)"]
backward: s
"""


def plain_order() -> Plain:
    x, u, a, b = (leaf(ORDER[name]) for name in "xuab")
    c = const(ORDER["c"])
    p1, p2 = leaf(ORDER["px.p"]), leaf(ORDER["xp.p"])
    y, w, o = p1 * x, u * p2, b * a
    s = (y * c).sum() + (w * c).sum() + (o * c).sum()
    named = grads_of(s, {"x": x, "u": u, "a": a, "b": b, "px.p": p1, "xp.p": p2,
                         "y": y, "w": w, "o": o})
    leaves = {"x": x, "u": u, "a": a, "b": b, "c": c, "px.p": p1, "xp.p": p2}
    return Plain(named, final_grads(s, leaves))


# --- None entries and zeros (B01, B06, B07) -------------------------------------------------------

NONE: dict[str, Any] = {
    "x": [0.5, -1.0, 2.0], "a": [1.0, 2.0, -0.5], "k": [0.3, -0.7, 1.2],
    "u": [[1.0, -2.0, 0.5], [0.2, 0.4, -0.6]], "c": C3, "d": [[0.5, 0.7], [0.9, 1.1]],
    "lin.weight": [[0.2, -0.5, 0.3], [0.7, 0.1, -0.4]], "lin.bias": [0.05, -0.1],
}
NONE_SPEC = f"""
inputs:
  x: {{value: {flow(NONE["x"])}, requires_grad: true}}
  a: {{value: {flow(NONE["a"])}, requires_grad: true}}
  k: {flow(NONE["k"])}
  u: {flow(NONE["u"])}
  c: {flow(NONE["c"])}
  d: {flow(NONE["d"])}
layers:
  lin: {{Linear: {{in_features: 3, out_features: 2}}, weight: {flow(NONE["lin.weight"])},
        bias: {flow(NONE["lin.bias"])}}}
modules:
  scale:
    forward: {{args: [h], steps: ["o = h * 3.0"]}}
  gate:
    forward: {{args: [h, g], steps: ["o = h * g"]}}
forward: ["y = scale(x)", "w = gate(a, k)", "v = lin(u)",
          "s = sum(y * c) + sum(w * c) + sum(v * d)"]
backward: s
"""


def plain_none() -> Plain:
    x, a = leaf(NONE["x"]), leaf(NONE["a"])
    k, u, c, d = (const(NONE[name]) for name in "kucd")
    weight, bias = leaf(NONE["lin.weight"]), leaf(NONE["lin.bias"])
    y = x * 3.0
    w = a * k
    v = nn.functional.linear(u, weight, bias)
    s = (y * c).sum() + (w * c).sum() + (v * d).sum()
    named = grads_of(s, {"x": x, "a": a, "lin.weight": weight, "lin.bias": bias,
                         "y": y, "w": w, "v": v})
    leaves = {"x": x, "a": a, "k": k, "u": u, "c": c, "d": d, "lin.weight": weight,
              "lin.bias": bias}
    return Plain(named, final_grads(s, leaves))


# --- nn.Linear variants (B08) --------------------------------------------------------------------


@dataclass(frozen=True)
class LinearCase:
    layer: str
    input: str
    output: str
    bias: bool
    node: str


LINEAR_CASES = (
    LinearCase("l1b", "a1", "h1b", True, "ViewBackward0"),
    LinearCase("l1n", "b1", "h1n", False, "SqueezeBackward4"),
    LinearCase("l2b", "a2", "h2b", True, "AddmmBackward0"),
    LinearCase("l2n", "b2", "h2n", False, "MmBackward0"),
    LinearCase("l3b", "a3", "h3b", True, "ViewBackward0"),
    LinearCase("l3n", "b3", "h3n", False, "UnsafeViewBackward0"),
)


def _numbers(shape: tuple[int, ...], start: float) -> Any:
    """Distinct, non-uniform literal values of a shape (nested lists, two decimals)."""
    count = iter(range(1, 1_000))

    def fill(dims: tuple[int, ...]) -> Any:
        if not dims:
            i = next(count)
            return round(start + 0.37 * i - 0.11 * (i % 3) * i, 2)
        return [fill(dims[1:]) for _ in range(dims[0])]

    return fill(shape)


LINEAR_SHAPES = {"1": (3,), "2": (2, 3), "3": (2, 2, 3)}
LINEAR: dict[str, Any] = {}
for _number, _case in enumerate(LINEAR_CASES):
    _dims = LINEAR_SHAPES[_case.layer[1]]
    LINEAR[_case.input] = _numbers(_dims, -1.0 + 0.2 * _number)
    LINEAR[f"{_case.layer}.weight"] = _numbers((2, 3), -0.9 + 0.1 * _number)
    if _case.bias:
        LINEAR[f"{_case.layer}.bias"] = [round(0.05 * (_number + 1), 2),
                                          round(-0.1 * (_number + 1), 2)]
for _key, _dims in LINEAR_SHAPES.items():
    LINEAR[f"c{_key}"] = _numbers(_dims[:-1] + (2,), 0.3)


def _linear_layer(case: LinearCase) -> str:
    options = "in_features: 3, out_features: 2" + ("" if case.bias else ", bias: false")
    text = (f"  {case.layer}: {{Linear: {{{options}}}, "
            f"weight: {flow(LINEAR[case.layer + '.weight'])}")
    if case.bias:
        text += f", bias: {flow(LINEAR[case.layer + '.bias'])}"
    return text + "}"


LINEAR_SPEC = "\n".join([
    "inputs:",
    *(f"  {case.input}: {{value: {flow(LINEAR[case.input])}, requires_grad: true}}"
      for case in LINEAR_CASES),
    *(f"  c{key}: {flow(LINEAR['c' + key])}" for key in LINEAR_SHAPES),
    "layers:",
    *(_linear_layer(case) for case in LINEAR_CASES),
    "forward:",
    *(f'  - "{case.output} = {case.layer}({case.input})"' for case in LINEAR_CASES),
    '  - "s = ' + " + ".join(f"sum({case.output} * c{case.layer[1]})"
                             for case in LINEAR_CASES) + '"',
    "backward: s",
    "",
])


def plain_linear() -> Plain:
    leaves: dict[str, torch.Tensor] = {}
    tensors: Tensors = {}
    total = torch.tensor(0.0)
    for case in LINEAR_CASES:
        x = leaves[case.input] = leaf(LINEAR[case.input])
        weight = leaves[f"{case.layer}.weight"] = leaf(LINEAR[f"{case.layer}.weight"])
        bias = None
        if case.bias:
            bias = leaves[f"{case.layer}.bias"] = leaf(LINEAR[f"{case.layer}.bias"])
        out = nn.functional.linear(x, weight, bias)
        tensors.update({case.input: x, f"{case.layer}.weight": weight, case.output: out})
        if bias is not None:
            tensors[f"{case.layer}.bias"] = bias
        total = total + (out * const(LINEAR[f"c{case.layer[1]}"])).sum()
    for key in LINEAR_SHAPES:
        leaves[f"c{key}"] = const(LINEAR[f"c{key}"])
    return Plain(grads_of(total, tensors), final_grads(total, leaves))


# --- broadcasting --------------------------------------------------------------------------------

BROAD: dict[str, Any] = {
    "x": 0.5, "r": [[1.0], [-2.0]], "c": C3, "d": [[0.5, 1.1, 1.7], [0.2, -0.4, 0.9]],
    "m.p": [3.0, -1.0, 2.0], "n.q": [0.5, 1.5, -2.0],
}
BROAD_SPEC = f"""
inputs:
  x: {{value: {flow(BROAD["x"])}, requires_grad: true}}
  r: {{value: {flow(BROAD["r"])}, requires_grad: true}}
  c: {flow(BROAD["c"])}
  d: {flow(BROAD["d"])}
modules:
  m:
    params: {{p: {flow(BROAD["m.p"])}}}
    forward: {{args: [h], steps: ["y = p * h"]}}
  n:
    params: {{q: {flow(BROAD["n.q"])}}}
    forward: {{args: [h], steps: ["o = h * q"]}}
forward: ["y = m(x)", "o = n(r)", "s = sum(y * c) + sum(o * d)"]
backward: s
"""


def plain_broad() -> Plain:
    x, r = leaf(BROAD["x"]), leaf(BROAD["r"])
    c, d = const(BROAD["c"]), const(BROAD["d"])
    p, q = leaf(BROAD["m.p"]), leaf(BROAD["n.q"])
    y, o = p * x, r * q
    s = (y * c).sum() + (o * d).sum()
    named = grads_of(s, {"x": x, "r": r, "m.p": p, "n.q": q, "y": y, "o": o})
    return Plain(named, final_grads(s, {"x": x, "r": r, "c": c, "d": d, "m.p": p, "n.q": q}))


# --- tuple outputs (B02) -------------------------------------------------------------------------

TUPLE: dict[str, Any] = {"x": [0.5, 1.0, 1.5], "v": [1.0, -2.0, 0.5, 3.0], "c": C3,
                         "e": [0.3, -0.9]}
TUPLE_SPEC = f"""
inputs:
  x: {{value: {flow(TUPLE["x"])}, requires_grad: true}}
  v: {{value: {flow(TUPLE["v"])}, requires_grad: true}}
  c: {flow(TUPLE["c"])}
  e: {flow(TUPLE["e"])}
modules:
  two:
    forward: {{args: [h], steps: ["a = h * 2", "b = exp(h)"], returns: [a, b]}}
  halves:
    forward: {{args: [h], steps: ["a, b = chunk(h, 2)"], returns: [a, b]}}
forward: ["p, q = two(x)", "f, g = halves(v)",
          "s = sum(p * c) + sum(q * c * 3) + sum(f * e) + sum(g * e * 2)"]
backward: s
"""


def plain_tuple() -> Plain:
    def loss(x_for_a: torch.Tensor, x_for_b: torch.Tensor,
             v: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        p, q = x_for_a * 2, torch.exp(x_for_b)
        f, g = torch.chunk(v, 2)
        c, e = const(TUPLE["c"]), const(TUPLE["e"])
        s = (p * c).sum() + (q * c * 3).sum() + (f * e).sum() + (g * e * 2).sum()
        return s, {"p": p, "q": q, "f": f, "g": g}

    x, v = leaf(TUPLE["x"]), leaf(TUPLE["v"])
    s, steps = loss(x, x, v)
    named = grads_of(s, {"x": x, "v": v, **steps})
    # The contribution to dL/dx through the first output only: a separate copy of x for it.
    x_a, x_b = leaf(TUPLE["x"]), leaf(TUPLE["x"])
    split, _ = loss(x_a, x_b, leaf(TUPLE["v"]))
    (through_a,) = torch.autograd.grad(split, [x_a])
    leaves = {"x": x, "v": v, "c": const(TUPLE["c"]), "e": const(TUPLE["e"])}
    return Plain(named, final_grads(s, leaves), {"x via a": through_a})


# --- nested modules sharing a last node (B10) ----------------------------------------------------

NEST: dict[str, Any] = {"x": [0.5, -1.0, 2.0], "c": C3, "outer.w": [1.5, -0.5, 2.0]}
NEST_SPEC = f"""
inputs:
  x: {{value: {flow(NEST["x"])}, requires_grad: true}}
  c: {flow(NEST["c"])}
modules:
  outer:
    params: {{w: {flow(NEST["outer.w"])}}}
    modules:
      inner:
        layers: {{act: Tanh}}
        forward: {{args: [u], steps: ["v = act(u)"]}}
    forward: {{args: [h], steps: ["g = h * w", "o = inner(g)"]}}
forward: ["y = outer(x)", "s = sum(y * c)"]
backward: s
"""


def plain_nest() -> Plain:
    x, c, w = leaf(NEST["x"]), const(NEST["c"]), leaf(NEST["outer.w"])
    g = x * w
    y = torch.tanh(g)
    s = (y * c).sum()
    named = grads_of(s, {"x": x, "outer.w": w, "outer.g": g, "y": y})
    return Plain(named, final_grads(s, {"x": x, "c": c, "outer.w": w}))


class _Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.Tanh()

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.act(u)
        return result


class _Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(NEST["outer.w"]))
        self.inner = _Inner()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.inner(h * self.w)
        return result


class _NestTop(nn.Module):
    """NEST_SPEC's model in plain torch (the top level takes every input, in spec order)."""

    def __init__(self) -> None:
        super().__init__()
        self.outer = _Outer()

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = (self.outer(x) * c).sum()
        return result


def plain_module_hook_order(mode: str) -> list[tuple[str, str]]:
    """(hook kind, module path) of every module backward hook call of _NestTop, in order."""
    order: list[tuple[str, str]] = []
    top = _NestTop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path, module in top.named_modules():
            if mode == "legacy":
                module.register_backward_hook(
                    lambda m, gi, go, path=path: order.append(("backward", path)))
            else:
                module.register_full_backward_pre_hook(
                    lambda m, go, path=path: order.append(("full_backward_pre", path)))
                module.register_full_backward_hook(
                    lambda m, gi, go, path=path: order.append(("full_backward", path)))
        output = top(leaf(NEST["x"]), const(NEST["c"]))
    output.backward()
    return order


# --- a module called twice (B09) ------------------------------------------------------------------



def plain_twice() -> Plain:
    """Shared weights, plus a second run with one copy of each parameter per call: the
    gradient of a copy is that call's contribution alone."""

    def run(weights: list[torch.Tensor], biases: list[torch.Tensor], ws: list[torch.Tensor],
            x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        h1 = nn.functional.linear(x, weights[0], biases[0])
        h2 = nn.functional.linear(h1, weights[1], biases[1])
        g1 = torch.tanh(v)
        y1 = g1 * ws[0]
        g2 = torch.tanh(y1)
        y2 = g2 * ws[1]
        s = (h2 * const(TWICE["c"])).sum() + (y2 * const(TWICE["d"])).sum()
        return s, {"h1": h1, "h2": h2, "y1": y1, "y2": y2, "blk.g": g1, "blk.g@2": g2}

    x, v = leaf(TWICE["x"]), leaf(TWICE["v"])
    weight, bias, w = leaf(TWICE["lin.weight"]), leaf(TWICE["lin.bias"]), leaf(TWICE["blk.w"])
    s, steps = run([weight, weight], [bias, bias], [w, w], x, v)
    named = grads_of(s, {"x": x, "v": v, "lin.weight": weight, "lin.bias": bias, "blk.w": w,
                         **steps})
    copies = {f"{name}#{call}": leaf(TWICE[name]) for name in ("lin.weight", "lin.bias", "blk.w")
              for call in (1, 2)}
    split, _ = run([copies["lin.weight#1"], copies["lin.weight#2"]],
                   [copies["lin.bias#1"], copies["lin.bias#2"]],
                   [copies["blk.w#1"], copies["blk.w#2"]], leaf(TWICE["x"]), leaf(TWICE["v"]))
    contrib = grads_of(split, copies)
    leaves = {"x": x, "v": v, "c": const(TWICE["c"]), "d": const(TWICE["d"]),
              "lin.weight": weight, "lin.bias": bias, "blk.w": w}
    return Plain(named, final_grads(s, leaves), contrib)


# --- every case, by name -------------------------------------------------------------------------

CASES: dict[str, tuple[str, Callable[[], Plain]]] = {
    "operand_order": (ORDER_SPEC, plain_order),
    "none_entries": (NONE_SPEC, plain_none),
    "linear": (LINEAR_SPEC, plain_linear),
    "broadcast": (BROAD_SPEC, plain_broad),
    "tuple_outputs": (TUPLE_SPEC, plain_tuple),
    "nested": (NEST_SPEC, plain_nest),
    "twice": (TWICE_SPEC, plain_twice),
}
