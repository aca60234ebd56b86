"""A forward-hook capture on a layer whose output is not a named step (`sigmoid(conv1(x))`), a
regression a fuzzer found; torch is the oracle.

The hook-free value it is checked against used to be looked up by step name, found nothing, and
the check failed (a wrong ✗). The stored entries are compared with a plain
`register_forward_hook` on the same build and with the layer's own functional formula.
Variants: a nested module calling the layer twice per forward inside an expression, a layer
applied to its own output in one step, and a composite module whose output feeds a function.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradexplain.capture.build import build
from gradexplain.capture.lessons.activations import activation_lessons, hook_free_outputs
from gradexplain.language import ModelSpec, load_spec_text
from gradexplain.records.lessons.activations import ActivationLesson
from tests.helpers.cli import run_cli
from tests.helpers.walkjson import (
    JSON,
)

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


def stored_tensor(lesson: ActivationLesson, index: int) -> torch.Tensor:
    value = lesson.stored[index].values[0].value
    assert value is not None
    return torch.tensor(value, dtype=torch.float64)


def expected_tensor(lesson: ActivationLesson, index: int) -> torch.Tensor:
    expected = lesson.stored[index].expected
    assert expected is not None and expected.value is not None
    return torch.tensor(expected.value, dtype=torch.float64)


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return torch.allclose(got, want.detach().double(), rtol=1e-5, atol=1e-6)


def test_capture_of_an_unnamed_layer_output_is_verified() -> None:
    spec = load_spec_text(CAPTURE_UNNAMED)
    (lesson,) = activation_lessons(spec)
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
    feats, blocks = activation_lessons(spec)
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
    (lesson,) = activation_lessons(spec)
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
    import gradexplain.capture.lessons.activations as capture_module

    spec = load_spec_text(CAPTURE_UNNAMED)
    real = capture_module.hook_free_outputs

    def the_step(*args: Any) -> list[tuple[torch.Tensor, ...]]:
        return [tuple(torch.sigmoid(tensor) for tensor in call) for call in real(*args)]

    monkeypatch.setattr(capture_module, "hook_free_outputs", the_step)
    (lesson,) = activation_lessons(spec)
    assert not lesson.verified and not lesson.stored[0].verified
