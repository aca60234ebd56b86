"""Edge cases of labelling and of the capture check that a fuzzer found; torch is the oracle.

This file owns two regressions:

- A module argument the module's forward never uses (`m(u, x)` computing `x * 2`). Torch's full
  backward hook then gets a zeros tensor for it (its BackwardHookFunction fills in zeros), and the
  engine passes those zeros on to the leaf: `u.grad` is zeros in the full pass and None with
  legacy hooks. The walk used to stop with an internal KeyError. Each case is mirrored here in
  plain PyTorch (the same module, the same hooks, the same leaves) and the walk's JSON is compared
  with it: every hook argument's value, the labels of the unused argument, and each pass's
  `.grad`. Variants: the unused argument first or last, also used outside the module, passed
  through a nested module, and the hooks article's x1 * x2 * W with one factor unused.
- A forward-hook capture on a layer whose output is not a named step (`sigmoid(conv1(x))`). The
  hook-free value it is checked against used to be looked up by step name, found nothing, and
  the check failed (a wrong ✗). The stored entries are compared with a plain
  `register_forward_hook` on the same build and with the layer's own functional formula.
  Variants: a nested module calling the layer twice per forward inside an expression, a layer
  applied to its own output in one step, and a composite module whose output feeds a function.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradexplain.capture.build import build
from gradexplain.capture.lessons.captures import capture_lessons, hook_free_outputs
from gradexplain.language import ModelSpec, load_spec_text
from gradexplain.records.lessons.captures import CaptureLesson
from tests.helpers.cli import SPECS, run_cli
from tests.helpers.walkjson import (
    JSON,
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


# --- bug 2: a capture on a layer whose output is not a named step -------------------------------

# The fuzzer's spec, verbatim (plus a seed, so the test's own build draws the same image).
CAPTURE_UNNAMED = """
seed: 0
inputs:
  image: {randn: [1, 1, 4, 4], requires_grad: true}
modules:
  net:
    layers:
      conv1: {Conv2d: {in_channels: 1, out_channels: 1, kernel_size: 3}}
    forward: {args: [x], steps: ["c1 = sigmoid(conv1(x))"]}
forward: ["c = net(image)", "s = sum(c)"]
backward: s
captures:
  save_feat: net.conv1
"""

# A layer two levels down, inside an expression, in a module the model calls twice (so the hook
# fires twice per forward, each time on another input), removed after the first forward.
CAPTURE_NESTED = """
seed: 1
inputs:
  image: {randn: [1, 1, 5, 5], requires_grad: true}
modules:
  net:
    modules:
      block:
        layers:
          conv: {Conv2d: {in_channels: 1, out_channels: 1, kernel_size: 3, padding: 1}}
        forward: {args: [x], steps: ["y = relu(conv(x)) * 2"]}
    forward: {args: [x], steps: ["h = block(x)", "o = tanh(block(h))"]}
forward: ["o = net(image)", "s = sum(o)"]
backward: s
captures:
  feats: {module: net.block.conv, remove_after: 1}
  blocks: net.block
"""

# A layer applied to its own output in one step: the inner call runs (and is stored) first.
CAPTURE_TWICE_IN_ONE_STEP = """
seed: 2
inputs:
  x: {randn: [3], requires_grad: true}
modules:
  net:
    layers:
      lin: {Linear: {in_features: 3, out_features: 3}}
    forward: {args: [x], steps: ["y = lin(tanh(lin(x)))"]}
forward: ["y = net(x)", "s = sum(y)"]
backward: s
captures:
  feats: net.lin
"""


def plain_hook_outputs(spec: ModelSpec, module: str, forwards: int = 1) -> list[torch.Tensor]:
    """The article's pattern in plain torch on a fresh build: a forward hook that appends the
    module's output, `forwards` forward calls, no removal."""
    built = build(spec)
    stored: list[torch.Tensor] = []

    def hook(_module: nn.Module, _args: tuple[Any, ...], output: torch.Tensor) -> None:
        stored.append(output.detach().clone())

    handle = dict(built.model.named_modules())[module].register_forward_hook(hook)
    try:
        for _ in range(forwards):
            built.model(*built.inputs)
    finally:
        handle.remove()
    return stored


def stored_tensor(lesson: CaptureLesson, index: int) -> torch.Tensor:
    value = lesson.stored[index].values[0].value
    assert value is not None
    return torch.tensor(value, dtype=torch.float64)


def expected_tensor(lesson: CaptureLesson, index: int) -> torch.Tensor:
    expected = lesson.stored[index].expected
    assert expected is not None and expected.value is not None
    return torch.tensor(expected.value, dtype=torch.float64)


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return torch.allclose(got, want.detach().double(), rtol=1e-5, atol=1e-6)


def test_capture_of_an_unnamed_layer_output_is_verified() -> None:
    spec = load_spec_text(CAPTURE_UNNAMED)
    (lesson,) = capture_lessons(spec)
    assert lesson.verified, lesson
    assert lesson.calls_per_forward == 1 and lesson.output_shape == (1, 1, 2, 2)
    assert lesson.output_names == ("net.c1:conv1",)
    (hooked,) = plain_hook_outputs(spec, "net.conv1")
    built = build(spec)
    conv1 = dict(built.model.named_modules())["net.conv1"]
    assert isinstance(conv1, nn.Conv2d)
    with torch.no_grad():
        formula = F.conv2d(built.input("image"), conv1.weight, conv1.bias)
    for reference in (hooked, formula):
        assert close(stored_tensor(lesson, 0), reference)
        assert close(expected_tensor(lesson, 0), reference)
    # The step's own value is sigmoid of it: checking against that would have been wrong.
    assert not close(expected_tensor(lesson, 0), torch.sigmoid(formula))


def test_the_hook_free_reference_is_the_layer_output_not_the_step() -> None:
    spec = load_spec_text(CAPTURE_UNNAMED)
    (call,) = hook_free_outputs(spec, "net.conv1")
    built = build(spec)
    conv1 = dict(built.model.named_modules())["net.conv1"]
    assert isinstance(conv1, nn.Conv2d)
    with torch.no_grad():
        formula = F.conv2d(built.input("image"), conv1.weight, conv1.bias)
    assert len(call) == 1 and close(call[0].double(), formula)


def test_the_fuzzer_capture_spec_walks_clean(tmp_path: Path) -> None:
    spec = tmp_path / "bug2.yaml"
    spec.write_text(CAPTURE_UNNAMED, encoding="utf-8")
    walked = run_cli("walk", str(spec))
    assert walked.code == 0, walked.stdout[-3000:]
    assert "FAILED" not in walked.stdout
    flat = " ".join(walked.stdout.split())
    assert "✓ every entry equals net.c1:conv1 of a hook-free run" in flat
    as_json = run_cli("walk", str(spec), "--format", "json")
    doc: JSON = json.loads(as_json.stdout)
    (capture,) = doc["lessons"]["captures"]
    assert capture["verified"] is True and capture["output_names"] == ["net.c1:conv1"]


def test_capture_in_a_nested_module_called_twice_per_forward() -> None:
    spec = load_spec_text(CAPTURE_NESTED)
    feats, blocks = capture_lessons(spec)
    hooked = plain_hook_outputs(spec, "net.block.conv")
    assert len(hooked) == 2, "torch: the hook fires once per call of block"
    assert feats.verified and feats.calls_per_forward == 2
    assert feats.output_names == ("net.block.y:conv",)
    assert [(f.hooked, f.entries, f.stored_count) for f in feats.forwards] == [
        (True, 2, 2), (False, 0, 2)]
    for index, reference in enumerate(hooked):
        assert close(stored_tensor(feats, index), reference)
        assert close(expected_tensor(feats, index), reference)
    # Independently of any hook: conv of the image, then conv of the first block's output.
    built = build(spec)
    conv = dict(built.model.named_modules())["net.block.conv"]
    assert isinstance(conv, nn.Conv2d)
    with torch.no_grad():
        first = F.conv2d(built.input("image"), conv.weight, conv.bias, padding=1)
        second = F.conv2d(torch.relu(first) * 2, conv.weight, conv.bias, padding=1)
    assert close(expected_tensor(feats, 0), first)
    assert close(expected_tensor(feats, 1), second)
    assert not close(expected_tensor(feats, 1), first), "each call checked against its own"
    # The composite module: its second call's output feeds tanh directly.
    block_outputs = plain_hook_outputs(spec, "net.block")
    assert blocks.verified and blocks.calls_per_forward == 2
    assert blocks.output_names == ("net.h", "net.o:block")
    for index, reference in enumerate(block_outputs):
        assert close(stored_tensor(blocks, index), reference)
        assert close(expected_tensor(blocks, index), reference)
    assert close(expected_tensor(blocks, 1), torch.relu(second) * 2)


def test_a_layer_applied_to_its_own_output_in_one_step() -> None:
    spec = load_spec_text(CAPTURE_TWICE_IN_ONE_STEP)
    (lesson,) = capture_lessons(spec)
    hooked = plain_hook_outputs(spec, "net.lin")
    assert len(hooked) == 2
    assert lesson.verified and lesson.calls_per_forward == 2
    assert lesson.output_names == ("net.y:lin", "net.y")
    built = build(spec)
    lin = dict(built.model.named_modules())["net.lin"]
    assert isinstance(lin, nn.Linear)
    with torch.no_grad():
        inner = F.linear(built.input("x"), lin.weight, lin.bias)
        outer = F.linear(torch.tanh(inner), lin.weight, lin.bias)
    for index, (reference, formula) in enumerate(zip(hooked, (inner, outer), strict=True)):
        assert close(stored_tensor(lesson, index), reference)
        assert close(expected_tensor(lesson, index), formula)


def test_a_wrong_reference_for_an_unnamed_call_still_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not vacuous for an unnamed call: against the step's value (sigmoid of the
    layer output, what a lookup by step name would find) every entry fails."""
    import gradexplain.capture.lessons.captures as capture_module

    spec = load_spec_text(CAPTURE_UNNAMED)
    real = capture_module.hook_free_outputs

    def the_step(*args: Any) -> list[tuple[torch.Tensor, ...]]:
        return [tuple(torch.sigmoid(tensor) for tensor in call) for call in real(*args)]

    monkeypatch.setattr(capture_module, "hook_free_outputs", the_step)
    (lesson,) = capture_lessons(spec)
    assert not lesson.verified and not lesson.stored[0].verified
