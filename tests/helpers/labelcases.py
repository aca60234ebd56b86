"""`gradexplain walk --format json` on one small inline spec per case family of
../shared/reference/torch-hook-facts.md, each against plain PyTorch computed here.

Families: operand order of the last op (A1, B08); None entries for Python scalars and inputs that
do not require grad (B01, B06, B07); nn.Linear's AddmmBackward0 and its MmBackward0 /
SqueezeBackward4 / ViewBackward0 / UnsafeViewBackward0 variants (B08); broadcasting; zeros for
non-requiring inputs in full hooks (B06); tuple outputs (B02); the BackwardHookFunctionBackward
wrappers of full hooks (A2, E1); nested modules sharing a last node (B10); a module called twice
(B09).

The spec texts are written from the same Python numbers the oracles use. Each spec is walked once
(all side by side, in a module-scoped fixture) and read by several tests.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers.cli import run_cli
from tests.helpers.spectexts import TWICE, TWICE_SPEC, flow
from tests.helpers.walkjson import (
    JSON,
    MODES,
    MODULE_BACKWARD_HOOKS,
    WRAPPER,
    Walk,
    args_named,
    assert_grad_arg,
    assert_grads,
    assert_meaning,
    assert_none,
    assert_value,
    assert_verified,
    contract_problems,
    describe,
    get,
    run_all,
    value_tensor,
)

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


# --- running them --------------------------------------------------------------------------------

CASES: dict[str, tuple[str, Callable[[], Plain]]] = {
    "operand_order": (ORDER_SPEC, plain_order),
    "none_entries": (NONE_SPEC, plain_none),
    "linear": (LINEAR_SPEC, plain_linear),
    "broadcast": (BROAD_SPEC, plain_broad),
    "tuple_outputs": (TUPLE_SPEC, plain_tuple),
    "nested": (NEST_SPEC, plain_nest),
    "twice": (TWICE_SPEC, plain_twice),
}


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Walk | AssertionError]:
    """Every case spec walked once, side by side; keyed by case name."""
    folder = tmp_path_factory.mktemp("walk_cases")
    paths: list[Path] = []
    for name, (text, _) in CASES.items():
        path = folder / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    results = run_all(paths)
    return {path.stem: results[str(path)] for path in paths}


@pytest.fixture(scope="module")
def plain() -> dict[str, Plain]:
    return {name: make() for name, (_, make) in CASES.items()}


def test_case_specs_are_valid(write_spec: Callable[[str, str], Path]) -> None:
    paths = [str(write_spec(text, f"{name}.yaml")) for name, (text, _) in CASES.items()]
    result = run_cli("validate", *paths)
    assert result.code == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", list(CASES))
def test_case_walks_with_every_check_verified(walked: dict[str, Walk | AssertionError],
                                              name: str) -> None:
    walk_ = get(walked, name)
    problems = contract_problems(walk_.doc)
    assert problems == [], "\n".join(problems[:40])
    assert walk_.code == 0, walk_.stderr[-2000:]
    assert [item["mode"] for item in walk_.passes()] == list(MODES)


@pytest.mark.parametrize("name", list(CASES))
def test_case_grads_match_plain_torch(walked: dict[str, Walk | AssertionError],
                                      plain: dict[str, Plain], name: str) -> None:
    assert_grads(get(walked, name), plain[name].grads)


def module_event(walk_: Walk, mode: str, target: str) -> JSON:
    return walk_.event(mode, "backward" if mode == "legacy" else "full_backward", target)


# --- operand order -------------------------------------------------------------------------------


def test_legacy_grad_input_follows_the_operand_order_of_the_last_op(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "operand_order"), plain["operand_order"].named
    for target, wrts, output in (("px", ("px.p", "x"), "y"),   # p * h
                                 ("xp", ("u", "xp.p"), "w"),   # h * p
                                 ("ba", ("b", "a"), "o")):     # b * a, args (a, b)
        event = module_event(walk_, "legacy", target)
        assert event["node"] == "MulBackward0", describe(event)
        grad_input = args_named(event, "grad_input")
        assert len(grad_input) == 2, describe(event)
        for item, wrt in zip(grad_input, wrts, strict=True):
            assert_grad_arg(item, named[wrt], of="s", wrt=wrt, what=describe(event))
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, named[output], of="s", wrt=output, what=describe(event))


def test_full_grad_input_follows_the_module_arguments(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "operand_order"), plain["operand_order"].named
    for target, wrts in (("px", ("x",)), ("xp", ("u",)), ("ba", ("a", "b"))):
        event = module_event(walk_, "full", target)
        assert event["node"] == WRAPPER, describe(event)
        grad_input = args_named(event, "grad_input")
        assert len(grad_input) == len(wrts), describe(event)  # never a parameter gradient
        for item, wrt in zip(grad_input, wrts, strict=True):
            assert_grad_arg(item, named[wrt], of="s", wrt=wrt, what=describe(event))


# --- None entries and zeros ---------------------------------------------------------------------


def test_legacy_none_for_a_python_scalar_and_an_input_without_grad(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "none_entries"), plain["none_entries"].named
    for target, wrt in (("scale", "x"), ("gate", "a")):  # h * 3.0; h * g, g without grad
        event = module_event(walk_, "legacy", target)
        assert event["node"] == "MulBackward0"
        first, second = args_named(event, "grad_input")
        assert_grad_arg(first, named[wrt], of="s", wrt=wrt, what=describe(event))
        assert_none(second, describe(event))
    event = module_event(walk_, "legacy", "lin")  # Linear on an input without grad
    assert event["node"] == "AddmmBackward0"
    bias, middle, weight = args_named(event, "grad_input")
    assert_grad_arg(bias, named["lin.bias"], of="s", wrt="lin.bias", what=describe(event))
    assert_none(middle, describe(event))
    assert_grad_arg(weight, named["lin.weight"].T, of="s", wrt="lin.weight", layout="transposed",
                    what=describe(event))


def test_full_hook_gives_zeros_for_an_input_not_requiring_grad(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "none_entries"), plain["none_entries"].named
    event = module_event(walk_, "full", "gate")
    first, second = args_named(event, "grad_input")
    assert_grad_arg(first, named["a"], of="s", wrt="a", what=describe(event))
    assert_value(second, torch.zeros(len(NONE["k"])), describe(event))
    assert_meaning(second, of="s", wrt="k", what=describe(event))
    assert_verified(second, describe(event))
    (scale_input,) = args_named(module_event(walk_, "full", "scale"), "grad_input")
    assert_grad_arg(scale_input, named["x"], of="s", wrt="x")


def test_full_hook_gives_none_when_no_input_requires_grad(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "none_entries"), plain["none_entries"].named
    event = module_event(walk_, "full", "lin")
    (grad_input,) = args_named(event, "grad_input")
    assert_none(grad_input, describe(event))
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, named["v"], of="s", wrt="v", what=describe(event))


# --- nn.Linear -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda case: f"{case.layer}-{case.node}")
def test_legacy_linear_node_and_grad_input(walked: dict[str, Walk | AssertionError],
                                           plain: dict[str, Plain], case: LinearCase) -> None:
    walk_, named = get(walked, "linear"), plain["linear"].named
    event = module_event(walk_, "legacy", case.layer)
    what = describe(event)
    assert event["node"] == case.node, what
    grad_input = args_named(event, "grad_input")
    weight, bias = f"{case.layer}.weight", f"{case.layer}.bias"
    if case.node == "AddmmBackward0":
        assert len(grad_input) == 3, what
        assert_grad_arg(grad_input[0], named[bias], of="s", wrt=bias, what=what)
        assert_grad_arg(grad_input[1], named[case.input], of="s", wrt=case.input, what=what)
        assert_grad_arg(grad_input[2], named[weight].T, of="s", wrt=weight, layout="transposed",
                        what=what)
    elif case.node == "MmBackward0":
        assert len(grad_input) == 2, what
        assert_grad_arg(grad_input[0], named[case.input], of="s", wrt=case.input, what=what)
        assert_grad_arg(grad_input[1], named[weight].T, of="s", wrt=weight, layout="transposed",
                        what=what)
    else:  # a view of the 2-D product: the layer output, reshaped to [rows, out]
        assert len(grad_input) == 1, what
        assert_grad_arg(grad_input[0], named[case.output].reshape(-1, 2), of="s",
                        wrt=case.output, layout="reshaped", what=what)
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, named[case.output], of="s", wrt=case.output, what=what)


@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda case: case.layer)
def test_full_linear_is_input_and_output(walked: dict[str, Walk | AssertionError],
                                         plain: dict[str, Plain], case: LinearCase) -> None:
    walk_, named = get(walked, "linear"), plain["linear"].named
    event = module_event(walk_, "full", case.layer)
    assert event["node"] == WRAPPER
    (grad_input,) = args_named(event, "grad_input")
    assert_grad_arg(grad_input, named[case.input], of="s", wrt=case.input, what=describe(event))
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, named[case.output], of="s", wrt=case.output,
                    what=describe(event))


# --- broadcasting --------------------------------------------------------------------------------


def test_legacy_broadcast_operands_get_their_own_shapes(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "broadcast"), plain["broadcast"].named
    event = module_event(walk_, "legacy", "m")  # p [3] * x []
    assert event["node"] == "MulBackward0"
    grad_p, grad_x = args_named(event, "grad_input")
    assert_grad_arg(grad_p, named["m.p"], of="s", wrt="m.p", what=describe(event))
    assert_grad_arg(grad_x, named["x"], of="s", wrt="x", what=describe(event))
    assert grad_x["shape"] == []
    # dL/dx is dL/dy * p summed over the broadcast dimension.
    summed = (named["y"] * torch.tensor(BROAD["m.p"])).sum()
    assert value_tensor(grad_x).item() == pytest.approx(summed.item(), rel=1e-5)
    event = module_event(walk_, "legacy", "n")  # r [2, 1] * q [3]
    grad_r, grad_q = args_named(event, "grad_input")
    assert_grad_arg(grad_r, named["r"], of="s", wrt="r", what=describe(event))
    assert_grad_arg(grad_q, named["n.q"], of="s", wrt="n.q", what=describe(event))
    assert (grad_r["shape"], grad_q["shape"]) == ([2, 1], [3])


# --- tuple outputs -------------------------------------------------------------------------------


def test_legacy_tuple_from_two_nodes_sees_the_first_output_only(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, case = get(walked, "tuple_outputs"), plain["tuple_outputs"]
    event = module_event(walk_, "legacy", "two")
    assert event["node"] == "MulBackward0"
    through_a, scalar = args_named(event, "grad_input")
    assert_grad_arg(through_a, case.contrib["x via a"], of="s", wrt="x", only=True,
                    what=describe(event))
    assert not torch.allclose(case.contrib["x via a"], case.named["x"])  # a part, not all
    assert_none(scalar, describe(event))
    (grad_output,) = args_named(event, "grad_output")
    assert_grad_arg(grad_output, case.named["p"], of="s", wrt="p", what=describe(event))


def test_legacy_tuple_from_one_node_sees_both_outputs(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "tuple_outputs"), plain["tuple_outputs"].named
    event = module_event(walk_, "legacy", "halves")
    assert event["node"] == "SplitBackward0"
    (grad_input,) = args_named(event, "grad_input")
    assert_grad_arg(grad_input, named["v"], of="s", wrt="v", only=False, what=describe(event))
    first, second = args_named(event, "grad_output")
    assert_grad_arg(first, named["f"], of="s", wrt="f", what=describe(event))
    assert_grad_arg(second, named["g"], of="s", wrt="g", what=describe(event))


def test_full_tuple_outputs_are_all_seen(walked: dict[str, Walk | AssertionError],
                                         plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "tuple_outputs"), plain["tuple_outputs"].named
    for target, wrt, outputs in (("two", "x", ("p", "q")), ("halves", "v", ("f", "g"))):
        event = module_event(walk_, "full", target)
        (grad_input,) = args_named(event, "grad_input")
        assert_grad_arg(grad_input, named[wrt], of="s", wrt=wrt, only=False, what=describe(event))
        pre = walk_.event("full", "full_backward_pre", target)
        for hooked in (event, pre):
            items = args_named(hooked, "grad_output")
            assert len(items) == len(outputs), describe(hooked)
            for item, output in zip(items, outputs, strict=True):
                assert_grad_arg(item, named[output], of="s", wrt=output, what=describe(hooked))


# --- nested modules sharing a last node ---------------------------------------------------------


def test_legacy_nested_hooks_share_the_last_node_child_first(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "nested"), plain["nested"].named
    tanh = walk_.events("legacy", "backward", node="TanhBackward0")
    assert [event["target"] for event in tanh] == ["outer.inner.act", "outer.inner", "outer"]
    for event in tanh:
        (grad_input,) = args_named(event, "grad_input")
        assert_grad_arg(grad_input, named["outer.g"], of="s", wrt="outer.g", what=describe(event))
        assert grad_input["meaning"]["aliases"] == ["outer.inner.u"]
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, named["y"], of="s", wrt="y", what=describe(event))
        assert grad_output["meaning"]["aliases"] == ["outer.inner.v", "outer.o"]


def test_full_nested_hooks_name_tensors_as_the_legacy_pass_does(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    """The BackwardHookFunction views a full hook puts around a tensor are that tensor: each
    module's input and output get the same canonical name as in the legacy pass."""
    walk_, named = get(walked, "nested"), plain["nested"].named
    for target, wrt in (("outer", "x"), ("outer.inner", "outer.g"),
                        ("outer.inner.act", "outer.g")):
        event = module_event(walk_, "full", target)
        (grad_input,) = args_named(event, "grad_input")
        assert_grad_arg(grad_input, named[wrt], of="s", wrt=wrt, what=describe(event))
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, named["y"], of="s", wrt="y", what=describe(event))


@pytest.mark.parametrize("mode", MODES)
def test_module_backward_hooks_fire_in_torchs_order(walked: dict[str, Walk | AssertionError],
                                                    mode: str) -> None:
    walk_ = get(walked, "nested")
    ours = [(event["hook"], event["target"]) for event in walk_.events(mode)
            if event["hook"] in MODULE_BACKWARD_HOOKS]
    assert ours == plain_module_hook_order(mode)


# --- the BackwardHookFunctionBackward wrappers of full hooks --------------------------------------


@pytest.mark.parametrize("name", ["nested", "twice", "operand_order"])
def test_full_hooks_sit_on_wrapper_nodes_and_legacy_never_does(
        walked: dict[str, Walk | AssertionError], name: str) -> None:
    walk_ = get(walked, name)
    full = [event for event in walk_.events("full")
            if event["hook"] in ("full_backward_pre", "full_backward")]
    assert full and all(event["node"] == WRAPPER for event in full)
    assert not [event for event in walk_.events("legacy") if event["node"] == WRAPPER]
    wrappers = walk_.events("full", "node", node=WRAPPER)
    assert wrappers, "no node hook fired on a BackwardHookFunctionBackward in the full pass"
    for event in wrappers:  # an identity: what goes in comes out
        grad_inputs = args_named(event, "grad_inputs")
        grad_outputs = args_named(event, "grad_outputs")
        assert len(grad_inputs) == len(grad_outputs), describe(event)
        for into, out in zip(grad_inputs, grad_outputs, strict=True):
            if out.get("value") is None:
                continue
            assert into["value"] == out["value"], describe(event)
            assert_verified(into, describe(event))
            assert into["meaning"]["of"] == "s", describe(event)


# --- a module called twice -----------------------------------------------------------------------


def test_legacy_layer_called_twice_sees_each_calls_contribution(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, case = get(walked, "twice"), plain["twice"]
    events = walk_.events("legacy", "backward", "lin")
    assert len(events) == 2
    for event, call, wrt_in, wrt_out in zip(events, (2, 1), ("h1", "x"), ("h2", "h1"),
                                            strict=True):
        what = f"{describe(event)} (call {call})"
        assert event["node"] == "AddmmBackward0", what
        bias, middle, weight = args_named(event, "grad_input")
        assert_grad_arg(bias, case.contrib[f"lin.bias#{call}"], of="s", wrt="lin.bias",
                        only=True, what=what)
        assert_grad_arg(middle, case.named[wrt_in], of="s", wrt=wrt_in, only=False, what=what)
        assert_grad_arg(weight, case.contrib[f"lin.weight#{call}"].T, of="s", wrt="lin.weight",
                        layout="transposed", only=True, what=what)
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, case.named[wrt_out], of="s", wrt=wrt_out, what=what)
    # The two contributions add up to the shared weight's gradient.
    total = case.contrib["lin.weight#1"] + case.contrib["lin.weight#2"]
    assert torch.allclose(total, case.named["lin.weight"], atol=1e-6)


def test_legacy_module_called_twice_names_the_second_call(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, case = get(walked, "twice"), plain["twice"]
    events = walk_.events("legacy", "backward", "blk")
    assert len(events) == 2
    for event, call, step, output in zip(events, (2, 1), ("blk.g@2", "blk.g"), ("y2", "y1"),
                                         strict=True):
        what = f"{describe(event)} (call {call})"
        assert event["node"] == "MulBackward0", what
        grad_g, grad_w = args_named(event, "grad_input")
        assert_grad_arg(grad_g, case.named[step], of="s", wrt=step, what=what)
        assert_grad_arg(grad_w, case.contrib[f"blk.w#{call}"], of="s", wrt="blk.w", only=True,
                        what=what)
        (grad_output,) = args_named(event, "grad_output")
        assert_grad_arg(grad_output, case.named[output], of="s", wrt=output, what=what)


def test_full_module_called_twice_sees_each_calls_input(
        walked: dict[str, Walk | AssertionError], plain: dict[str, Plain]) -> None:
    walk_, named = get(walked, "twice"), plain["twice"].named
    for target, calls in (("lin", (("h1", "h2"), ("x", "h1"))),
                          ("blk", (("y1", "y2"), ("v", "y1")))):
        events = walk_.events("full", "full_backward", target)
        assert len(events) == 2
        for event, (wrt_in, wrt_out) in zip(events, calls, strict=True):
            (grad_input,) = args_named(event, "grad_input")
            assert_grad_arg(grad_input, named[wrt_in], of="s", wrt=wrt_in, what=describe(event))
            (grad_output,) = args_named(event, "grad_output")
            assert_grad_arg(grad_output, named[wrt_out], of="s", wrt=wrt_out,
                            what=describe(event))
