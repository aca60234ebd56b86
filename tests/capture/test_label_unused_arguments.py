"""Labels of a module argument the module's forward never uses, a regression a fuzzer found;
torch is the oracle.

A module argument the module's forward never uses (`m(u, x)` computing `x * 2`). Torch's full
backward hook then gets a zeros tensor for it (its BackwardHookFunction fills in zeros), and the
engine passes those zeros on to the leaf: `u.grad` is zeros in the full pass and None with legacy
hooks. The walk used to stop with an internal KeyError. Each case is mirrored here in plain
PyTorch (the same module, the same hooks, the same leaves) and the walk's JSON is compared with
it: every hook argument's value, the labels of the unused argument, and each pass's `.grad`.
Variants: the unused argument first or last, also used outside the module, passed through a
nested module, and the hooks article's x1 * x2 * W with one factor unused. (The capture
regression the same fuzzer found: lessons/test_captures_unnamed_outputs.py.)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.helpers.cli import SPECS, run_cli
from tests.helpers.walkjson import (
    MODES,
    Walk,
    arg,
    args_named,
    assert_grads,
    assert_meaning,
    assert_none,
    assert_value,
    assert_verified,
    contract_problems,
    get,
    run_all,
)

Tensors = dict[str, torch.Tensor]
Grads = tuple[torch.Tensor | None, ...]


# --- bug 1: a module argument that is never used ------------------------------------------------

# The fuzzer's spec, verbatim.
UNUSED_FIRST = """
inputs:
  x: {value: [1.0], requires_grad: true}
  u: {value: [1.0], requires_grad: true}
modules:
  m:
    forward: {args: [u, x], steps: ["y = x * 2"]}
forward: ["y = m(u, x)"]
backward: y
"""

UNUSED_LAST = """
inputs:
  x: {value: [1.5, -2.0], requires_grad: true}
  u: {value: [0.5, 3.0], requires_grad: true}
modules:
  m:
    forward: {args: [x, u], steps: ["y = x * 3"]}
forward: ["y = m(x, u)", "s = sum(y)"]
backward: s
"""

# u is unused inside m but used after it: its .grad is the outside use's, m's full hook still
# sees zeros for it.
UNUSED_INSIDE_USED_OUTSIDE = """
inputs:
  x: {value: [1.5, -2.0], requires_grad: true}
  u: {value: [0.5, 3.0], requires_grad: true}
modules:
  m:
    forward: {args: [x, u], steps: ["y = x * 2"]}
forward: ["y = m(x, u)", "z = y * u", "s = sum(z)"]
backward: s
"""

# outer hands its first argument to inner, which ignores it: outer does not use it either.
UNUSED_NESTED = """
inputs:
  x: {value: [1.0, 2.0], requires_grad: true}
  u: {value: [3.0, -1.0], requires_grad: true}
  v: {value: [0.5, 0.25], requires_grad: true}
modules:
  outer:
    modules:
      inner:
        forward: {args: [a, b], steps: ["y = tanh(b)"]}
    forward: {args: [p, q, r], steps: ["h = inner(p, q)", "o = h * r"]}
forward: ["o = outer(x, u, v)", "s = sum(o)"]
backward: s
"""


def mul_param_unused() -> str:
    """specs/mul_param.yaml with `h = x2 * x2`: x1 is unused (the fuzzer's second find). Its
    intervention is left out: it is another lesson, not the labelling checked here."""
    text = (SPECS / "mul_param.yaml").read_text(encoding="utf-8")
    assert '"h = x1 * x2"' in text and "interventions:" in text
    text = text.replace('"h = x1 * x2"', '"h = x2 * x2"')
    return text[:text.index("interventions:")]


class Times(nn.Module):
    """`y = <arg used> * factor`; the other argument is never used."""

    def __init__(self, used: int, factor: float) -> None:
        super().__init__()
        self.used, self.factor = used, factor

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a, b)[self.used] * self.factor


class TopFirst(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = Times(used=1, factor=2.0)

    def forward(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.m(u, x)
        return output


class TopLast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = Times(used=0, factor=3.0)

    def forward(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.m(x, u)
        return output.sum()


class TopOutside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = Times(used=0, factor=2.0)

    def forward(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.m(x, u)
        return (y * u).sum()


class Inner(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.tanh(b)


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, p: torch.Tensor, q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.inner(p, q)
        return h * r


class TopNested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.outer = Outer()

    def forward(self, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        o: torch.Tensor = self.outer(x, u, v)
        return o.sum()


class SquareTimesW(nn.Module):
    """The hooks article's Model with `x2 * x2` in place of `x1 * x2`."""

    def __init__(self) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.tensor([5.0]))

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        return x2 * x2 * self.W


class TopMulParam(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = SquareTimesW()

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.model(x1, x2)
        return output


def mul_param_inputs() -> Tensors:
    """The spec's `rand` inputs, drawn as the build draws them (seed 0, in spec order)."""
    torch.manual_seed(0)
    return {"x1": torch.rand(1), "x2": torch.rand(1)}


@dataclass(frozen=True)
class Plain:
    """What plain torch gives in one mode: each module's hook calls (by module path, "" for the
    model), each leaf's tensor-hook values and each leaf's final `.grad`."""

    calls: dict[str, list[tuple[Grads, Grads]]]
    leaf_hooks: dict[str, list[torch.Tensor]]
    grads: dict[str, torch.Tensor | None]


def run_plain(mode: str, model: nn.Module, inputs: Tensors) -> Plain:
    """Forward and backward of `model` with a backward hook of `mode` on every module (as the
    walk registers them) and a tensor hook on every input."""
    leaves = {name: value.clone().requires_grad_(True) for name, value in inputs.items()}
    calls: dict[str, list[tuple[Grads, Grads]]] = {}
    leaf_hooks: dict[str, list[torch.Tensor]] = {name: [] for name in leaves}

    def module_hook(path: str) -> Callable[[nn.Module, Grads, Grads], None]:
        def hook(_module: nn.Module, grad_input: Grads, grad_output: Grads) -> None:
            calls.setdefault(path, []).append((
                tuple(None if g is None else g.detach().clone() for g in grad_input),
                tuple(None if g is None else g.detach().clone() for g in grad_output)))
        return hook

    for path, module in model.named_modules():
        if mode == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module.register_backward_hook(module_hook(path))
        else:
            module.register_full_backward_hook(module_hook(path))
    for name, leaf_tensor in leaves.items():
        leaf_tensor.register_hook(
            lambda grad, name=name: leaf_hooks[name].append(grad.detach().clone()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = model(*leaves.values())
    output.backward()
    grads: dict[str, torch.Tensor | None] = {name: leaf_tensor.grad
                                            for name, leaf_tensor in leaves.items()}
    grads.update({name: param.grad for name, param in model.named_parameters()})
    return Plain(calls, leaf_hooks, grads)


@dataclass(frozen=True)
class Case:
    """A spec, its plain-torch mirror, and which argument of which module is unused."""

    text: Callable[[], str]
    model: Callable[[], nn.Module]
    inputs: Callable[[], Tensors]
    module: str  # the module with the unused argument
    unused: int  # its position among the module's arguments
    leaf: str  # the leaf that argument is
    of: str  # the output backward starts from


CASES = {
    "first": Case(lambda: UNUSED_FIRST, TopFirst,
                  lambda: {"x": torch.tensor([1.0]), "u": torch.tensor([1.0])}, "m", 0, "u", "y"),
    "last": Case(lambda: UNUSED_LAST, TopLast,
                 lambda: {"x": torch.tensor([1.5, -2.0]), "u": torch.tensor([0.5, 3.0])},
                 "m", 1, "u", "s"),
    "outside": Case(lambda: UNUSED_INSIDE_USED_OUTSIDE, TopOutside,
                    lambda: {"x": torch.tensor([1.5, -2.0]), "u": torch.tensor([0.5, 3.0])},
                    "m", 1, "u", "s"),
    "nested": Case(lambda: UNUSED_NESTED, TopNested,
                   lambda: {"x": torch.tensor([1.0, 2.0]), "u": torch.tensor([3.0, -1.0]),
                            "v": torch.tensor([0.5, 0.25])}, "outer.inner", 0, "x", "s"),
    "mul_param": Case(mul_param_unused, TopMulParam, mul_param_inputs, "model", 0, "x1",
                      "output"),
}


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Walk | AssertionError]:
    folder = tmp_path_factory.mktemp("unused")
    paths: list[Path] = []
    for key, case in CASES.items():
        path = folder / f"{key}.yaml"
        path.write_text(case.text(), encoding="utf-8")
        paths.append(path)
    results = run_all(paths)
    return {key: results[str(path)] for key, path in zip(CASES, paths, strict=True)}


def walk_of(walks: dict[str, Walk | AssertionError], key: str) -> Walk:
    return get(walks, key)


@pytest.mark.parametrize("key", list(CASES))
def test_the_walk_runs_and_every_check_holds(walks: dict[str, Walk | AssertionError],
                                             key: str) -> None:
    found = walk_of(walks, key)
    assert found.code == 0, f"{key}: exit {found.code}\n{found.stderr[-2000:]}"
    assert contract_problems(found.doc) == []


@pytest.mark.parametrize("key", list(CASES))
@pytest.mark.parametrize("mode", MODES)
def test_module_hook_arguments_equal_torch(walks: dict[str, Walk | AssertionError], key: str,
                                           mode: str) -> None:
    """Every module's backward hook: each grad_input/grad_output entry is what plain torch's
    hook of the same kind got, None where torch passed None, labelled and verified otherwise."""
    case = CASES[key]
    found = walk_of(walks, key)
    plain = run_plain(mode, case.model(), case.inputs())
    hook = "backward" if mode == "legacy" else "full_backward"
    for path, torch_calls in plain.calls.items():
        events = found.events(mode, hook, path)
        assert len(events) == len(torch_calls), (
            f"{key} [{mode}] {path!r}: {len(events)} hook calls, torch made {len(torch_calls)}")
        for event, (grad_input, grad_output) in zip(events, torch_calls, strict=True):
            for prefix, expected in (("grad_input", grad_input), ("grad_output", grad_output)):
                items = args_named(event, prefix)
                assert len(items) == len(expected), f"{key} [{mode}] {path!r} {prefix}"
                for item, want in zip(items, expected, strict=True):
                    what = f"{key} [{mode}] {path!r}"
                    if want is None:
                        assert_none(item, what)
                    else:
                        assert_value(item, want, what)
                        assert_verified(item, what)


@pytest.mark.parametrize("key", list(CASES))
def test_the_unused_argument_is_labelled_zero(walks: dict[str, Walk | AssertionError],
                                              key: str) -> None:
    """Torch's full hook gives zeros (not None) for the unused argument; the label says which
    derivative that is, that it is 0, and why."""
    case = CASES[key]
    found = walk_of(walks, key)
    plain = run_plain("full", case.model(), case.inputs())
    (torch_call,) = plain.calls[case.module]
    torch_zeros = torch_call[0][case.unused]
    assert torch_zeros is not None and not torch_zeros.any(), "torch: a zeros tensor, not None"
    event = found.event("full", "full_backward", case.module)
    item = arg(event, f"grad_input[{case.unused}]")
    assert_value(item, torch_zeros)
    assert_meaning(item, of=case.of, wrt=case.leaf)
    assert_verified(item)
    text = item["meaning"]["text"]
    short = case.module.rsplit(".", 1)[-1]
    assert "= 0" in text and f"uses {case.leaf}" in text and short in text, text


@pytest.mark.parametrize("key", list(CASES))
def test_final_grads_and_leaf_hooks_equal_torch(walks: dict[str, Walk | AssertionError],
                                                key: str) -> None:
    """Each pass's `.grad` is plain torch's in that pass: zeros for the unused leaf with full
    hooks (the wrapper's zeros reach it), None with legacy ones (unless used elsewhere); the
    tensor hook on it fires exactly when torch's does, with the same value."""
    case = CASES[key]
    found = walk_of(walks, key)
    for mode in MODES:
        plain = run_plain(mode, case.model(), case.inputs())
        assert_grads(found, plain.grads, modes=(mode,))
        events = found.events(mode, "tensor", case.leaf)
        assert len(events) == len(plain.leaf_hooks[case.leaf]), f"{key} [{mode}]"
        for event, want in zip(events, plain.leaf_hooks[case.leaf], strict=True):
            item = arg(event, "grad")
            assert_value(item, want, f"{key} [{mode}]")
            assert_meaning(item, of=case.of, wrt=case.leaf)
            assert_verified(item, f"{key} [{mode}]")


def test_grads_differ_between_passes_as_in_torch(walks: dict[str, Walk | AssertionError]) -> None:
    """The unused leaf's .grad: None with legacy hooks, zeros with full hooks, in torch and in
    the walk alike (so the walk does not paper over the difference)."""
    case = CASES["first"]
    legacy = run_plain("legacy", case.model(), case.inputs())
    full = run_plain("full", case.model(), case.inputs())
    assert legacy.grads["u"] is None
    full_u = full.grads["u"]
    assert full_u is not None and torch.equal(full_u, torch.zeros(1))
    found = walk_of(walks, "first")
    assert found.grads("legacy")["u"] is None
    assert found.grads("full")["u"] == [0.0]


def test_the_fuzzer_spec_walks_in_text_diff_and_report(tmp_path: Path) -> None:
    spec = tmp_path / "bug1.yaml"
    spec.write_text(UNUSED_FIRST, encoding="utf-8")
    walked = run_cli("walk", str(spec))
    assert walked.code == 0, walked.stderr
    assert "internal error" not in walked.stderr + walked.stdout
    assert "checks verified against a hook-free run" in walked.stdout
    assert "∂y/∂u = 0 (no op in m uses u)" in walked.stdout
    diffed = run_cli("diff", str(spec))
    assert diffed.code == 0, diffed.stderr
    report = tmp_path / "report.md"
    reported = run_cli("report", str(spec), "-o", str(report))
    assert reported.code == 0, reported.stderr
    assert "no op in m uses u" in report.read_text(encoding="utf-8")
