"""The forward-hook capture lesson (the CAM pattern of the hooks tutorial); torch is the oracle.

Each test does what the article does in plain PyTorch, on the modules of `build(spec)`:
`register_forward_hook` with a hook appending the output to a list, forward, `handle.remove()`,
forward again; and compares the list and its counts with what the lesson recorded. The values are
also compared with the layer's own functional formula, a computation that involves no hook and
no spec machinery at all.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradexplain.capture.lessons.activations as capture_module
from gradexplain.capture.build import build
from gradexplain.capture.lessons.activations import activation_lessons, check_entry
from gradexplain.language import ModelSpec, load_spec, load_spec_text
from gradexplain.records.codec import from_data, to_data
from gradexplain.records.lessons.activations import ActivationLesson
from gradexplain.records.trace import TensorValue
from gradexplain.render.console import plain_text
from gradexplain.render.lessons.activations import activations_markdown, activations_text
from tests.helpers.cli import REPO, SPECS
from tests.helpers.mdcheck import assert_markdown_well_formed

# A layer called twice in one forward, inside a module the model calls twice: the hook on
# block.lin fires 4 times per forward, each time with a different input.
TWICE = """
name: twice
seed: 3
inputs:
  x: {randn: [2], requires_grad: true}
modules:
  block:
    layers:
      lin: {Linear: {in_features: 2, out_features: 2}}
    forward:
      args: [u]
      steps:
        - "h = lin(u)"
        - "y = lin(h)"
forward:
  - "a = block(x)"
  - "b = block(a)"
  - "s = sum(b)"
backward: s
captures:
  feats: {module: block.lin, remove_after: 2}
"""


def flat_text(lessons: list[ActivationLesson]) -> str:
    """The text output with its line wrapping undone, to find sentences in it."""
    return " ".join(plain_text(activations_text(lessons)).split())


def tensor_of(value: TensorValue) -> torch.Tensor:
    assert value.value is not None, "a small activation keeps its values"
    return torch.tensor(value.value, dtype=torch.float64)


def article_pattern(spec: ModelSpec, module: str, remove_after: int | None
                    ) -> tuple[list[torch.Tensor], list[int]]:
    """The tutorial's toy activation example, verbatim in spirit: the list and its length after
    each forward."""
    built = build(spec)
    save_feat: list[torch.Tensor] = []

    def hook_func(_module: nn.Module, _input: tuple[Any, ...], output: torch.Tensor) -> None:
        save_feat.append(output.detach().clone())

    target = dict(built.model.named_modules())[module]
    handle = target.register_forward_hook(hook_func)
    lengths = []
    forwards = 1 if remove_after is None else remove_after + 1
    if remove_after == 0:
        handle.remove()
    for number in range(1, forwards + 1):
        built.model(*built.inputs)
        lengths.append(len(save_feat))
        if number == remove_after:
            handle.remove()
    handle.remove()
    return save_feat, lengths


@pytest.fixture(scope="module")
def cam_spec() -> ModelSpec:
    return load_spec(SPECS / "cam_capture.yaml")


@pytest.fixture(scope="module")
def cam(cam_spec: ModelSpec) -> ActivationLesson:
    (lesson,) = activation_lessons(cam_spec)
    return lesson


def test_cam_capture_matches_the_article_pattern(cam_spec: ModelSpec,
                                                 cam: ActivationLesson) -> None:
    save_feat, lengths = article_pattern(cam_spec, "net.conv1", 1)
    assert lengths == [1, 1], "after handle.remove() the list does not grow"
    assert (cam.name, cam.module, cam.output_names) == ("save_feat", "net.conv1", ("net.c1",))
    assert cam.remove_after == 1 and cam.calls_per_forward == 1
    assert cam.output_shape == (1, 4, 8, 8) == tuple(save_feat[0].shape)
    assert [forward.stored_count for forward in cam.forwards] == lengths
    assert [(f.number, f.hooked, f.fired, f.entries, f.removed_after) for f in cam.forwards] == [
        (1, True, True, 1, True), (2, False, False, 0, False)]
    (entry,) = cam.stored
    assert (entry.index, entry.forward, entry.call) == (0, 1, 0)
    assert torch.allclose(tensor_of(entry.values[0]), save_feat[0].double(), atol=1e-6)
    assert entry.verified and cam.verified and cam.max_abs_err == entry.max_abs_err < 1e-6


def test_stored_activation_is_conv1_of_the_image(cam_spec: ModelSpec,
                                                 cam: ActivationLesson) -> None:
    built = build(cam_spec)
    conv1 = dict(built.model.named_modules())["net.conv1"]
    assert isinstance(conv1, nn.Conv2d)
    with torch.no_grad():
        by_formula = F.conv2d(built.input("image"), conv1.weight, conv1.bias, padding=1)
    assert torch.allclose(tensor_of(cam.stored[0].values[0]), by_formula.double(), atol=1e-5)
    assert cam.stored[0].expected is not None
    assert torch.allclose(tensor_of(cam.stored[0].expected), by_formula.double(), atol=1e-5)


def test_without_remove_after_one_forward_and_the_hook_stays() -> None:
    spec = load_spec(SPECS / "cnn_hooks.yaml")
    (lesson,) = activation_lessons(spec)
    save_feat, lengths = article_pattern(spec, "net.conv1", None)
    assert lesson.remove_after is None and not lesson.removed
    assert [(f.hooked, f.fired, f.stored_count, f.removed_after) for f in lesson.forwards] == [
        (True, True, lengths[0], False)]
    assert torch.allclose(tensor_of(lesson.stored[0].values[0]), save_feat[0].double(),
                          atol=1e-6)
    assert lesson.verified


def test_remove_before_the_first_forward_stores_nothing(cam_spec: ModelSpec) -> None:
    text = (SPECS / "cam_capture.yaml").read_text().replace("remove_after: 1", "remove_after: 0")
    (lesson,) = activation_lessons(load_spec_text(text))
    save_feat, lengths = article_pattern(cam_spec, "net.conv1", 0)
    assert lengths == [0] and save_feat == []
    assert [(f.hooked, f.fired, f.stored_count) for f in lesson.forwards] == [(False, False, 0)]
    assert lesson.stored == () and lesson.verified
    shown = flat_text([lesson])
    assert "the 1st forward did not call the hook: save_feat holds 0 tensors" in shown


def test_a_module_called_several_times_fires_once_per_call() -> None:
    spec = load_spec_text(TWICE)
    (lesson,) = activation_lessons(spec)
    save_feat, lengths = article_pattern(spec, "block.lin", 2)
    assert lengths == [4, 8, 8]
    assert lesson.calls_per_forward == 4
    assert lesson.output_names == ("block.h", "block.y")
    assert [(f.entries, f.stored_count) for f in lesson.forwards] == [(4, 4), (4, 8), (0, 8)]
    assert [(e.forward, e.call) for e in lesson.stored] == [(1, 0), (1, 1), (1, 2), (1, 3),
                                                             (2, 0), (2, 1), (2, 2), (2, 3)]
    for entry, expected in zip(lesson.stored, save_feat, strict=True):
        assert torch.allclose(tensor_of(entry.values[0]), expected.double(), atol=1e-6)
        assert entry.verified
    # Four different values: each entry was checked against its own call, not the first one.
    assert len({tuple(tensor_of(e.values[0]).tolist()) for e in lesson.stored[:4]}) == 4
    assert lesson.verified
    shown = flat_text([lesson])
    assert "the hook fires once per call: 4 entries per forward" in shown
    assert "fired 4 times" in shown
    assert "the 3rd forward did not call the hook: feats still holds 8 tensors" in shown


def test_check_entry_catches_a_wrong_value() -> None:
    good = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    assert check_entry((good.clone(),), (good,)) == (True, 0.0)
    verified, error = check_entry((good + torch.tensor([[0.0, 0.0], [0.0, 1e-2]]),), (good,))
    assert not verified and error == pytest.approx(1e-2, rel=1e-4)
    assert check_entry((good.T.reshape(4),), (good,)) == (False, math.inf)
    assert check_entry((good, good), (good,)) == (False, math.inf)


# log(0) = -inf: an activation may hold inf, and a stored copy of it is still the activation.
LOG_OF_ZERO = """
name: capture_inf
seed: 0
inputs:
  x: {value: [0.0, 1.0, 2.0], requires_grad: true}
modules:
  block:
    forward:
      args: [u]
      steps:
        - "y = log(u)"
forward:
  - "a = block(x)"
  - "s = sum(a)"
backward: s
captures:
  feats: {module: block}
"""


def test_a_stored_activation_holding_inf_verifies() -> None:
    (lesson,) = activation_lessons(load_spec_text(LOG_OF_ZERO))
    oracle = torch.log(torch.tensor([0.0, 1.0, 2.0]))
    (entry,) = lesson.stored
    stored = tensor_of(entry.values[0])
    # torch says the stored copy is the activation: -inf where log(0), the rest within rounding.
    assert torch.allclose(stored, oracle.double())
    assert entry.verified and lesson.verified
    assert entry.max_abs_err == 0.0


def test_check_entry_treats_inf_and_nan_as_values() -> None:
    held = torch.tensor([-math.inf, 0.0, math.nan, 2.0])
    assert torch.allclose(held.clone(), held, equal_nan=True)
    assert check_entry((held.clone(),), (held,)) == (True, 0.0)
    flipped = torch.tensor([math.inf, 0.0, math.nan, 2.0])
    assert not torch.allclose(flipped, held, equal_nan=True)
    assert check_entry((flipped,), (held,)) == (False, math.inf)
    finite = torch.tensor([-1e30, 0.0, math.nan, 2.0])
    assert not torch.allclose(finite, held, equal_nan=True)
    assert check_entry((finite,), (held,)) == (False, math.inf)


def test_check_entry_holds_tiny_activations_to_their_own_scale() -> None:
    # Activations of 1e-7: a copy twice too large is wrong however small, as torch says.
    tiny = torch.tensor([[1e-7, -2e-7], [3e-7, 5e-8]])
    assert not torch.allclose(tiny * 2, tiny)
    verified, error = check_entry((tiny * 2,), (tiny,))
    assert not verified and error == pytest.approx(3e-7, rel=1e-4)
    assert check_entry((tiny.clone(),), (tiny,)) == (True, 0.0)


def test_the_lesson_fails_when_the_reference_differs(cam_spec: ModelSpec,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real = capture_module.hook_free_outputs

    def shifted(*args: Any) -> list[tuple[torch.Tensor, ...]]:
        return [tuple(tensor + 0.5 for tensor in call) for call in real(*args)]

    monkeypatch.setattr(capture_module, "hook_free_outputs", shifted)
    (lesson,) = activation_lessons(cam_spec)
    assert not lesson.verified and not lesson.stored[0].verified
    assert lesson.max_abs_err == pytest.approx(0.5, rel=1e-5)
    assert "✗ FAILED" in plain_text(activations_text([lesson]))
    assert "✗ FAILED" in activations_markdown([lesson], 2)


def test_the_lesson_fails_when_the_counts_differ(cam_spec: ModelSpec,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = capture_module.hook_free_outputs

    def twice(*args: Any) -> list[tuple[torch.Tensor, ...]]:
        return real(*args) * 2

    monkeypatch.setattr(capture_module, "hook_free_outputs", twice)
    (lesson,) = activation_lessons(cam_spec)
    assert not lesson.verified and lesson.max_abs_err == math.inf
    assert "the entries per forward differ" in flat_text([lesson])


def test_lessons_survive_json(cam: ActivationLesson) -> None:
    data = json.loads(json.dumps(to_data(cam), allow_nan=False))
    assert from_data(ActivationLesson, data) == cam


def test_text_says_what_was_stored_and_what_remove_did(cam: ActivationLesson) -> None:
    shown = plain_text(activations_text([cam]), width=100)
    assert all(len(line) <= 100 for line in shown.splitlines())
    flat = flat_text([cam])
    assert ("a forward hook on net.conv1 stored its output (1, 4, 8, 8) in save_feat: the "
            "activation at an intermediate layer, as CAM needs") in flat
    assert ("after handle.remove() the 2nd forward did not call the hook: save_feat still holds "
            "1 tensor") in flat
    assert "save_feat[0]" in shown and "[1, 4, 8, 8] min" in shown, "128 values: summarised"
    assert "✓ every entry equals net.c1 of a hook-free run" in flat
    assert plain_text(activations_text([])) == ""


def test_markdown_is_well_formed(cam: ActivationLesson) -> None:
    text = activations_markdown([cam], 2)
    assert_markdown_well_formed(text)
    assert text.startswith("## Forward-hook captures\n")
    assert "\n### save_feat = forward hook on net.conv1" in text
    assert ("a forward hook on net.conv1 stored its output (1, 4, 8, 8) in save_feat: the "
            "activation at an intermediate layer, as CAM needs") in text
    assert "after handle.remove() the 2nd forward did not call the hook" in text
    assert "| 2 | removed | 0 | 1 |" in text
    assert activations_markdown([], 2) == ""
    twice = activation_lessons(load_spec_text(TWICE))
    assert_markdown_well_formed(activations_markdown([*twice, cam], 5))


def test_the_renderers_do_not_import_torch() -> None:
    code = ("import sys; import gradexplain.render.lessons.activations; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
