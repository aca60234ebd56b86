"""The intervention lesson against plain PyTorch: the same hooks, the same replacements, the same
gradients.

torch is the oracle: the hooks article's `Model` (x1 * x2 * W, a full backward hook that
normalizes grad_input to sum to 1) and the classic two modules are written here as the articles
write them, with the hooks registered in plain torch; every leaf `.grad` and every replaced value
must match the lesson's. Then the changed / unchanged sets, the independent check (and that it
catches a wrong value), torch's own messages for replacements it refuses, the spec rules, and
both renderers.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.capture.build import build
from gradexplain.capture.lessons import intervention_runs
from gradexplain.capture.lessons.interventions import intervention_lessons
from gradexplain.errors import ExpectationError, SpecSchemaError
from gradexplain.language import load_spec, load_spec_text
from gradexplain.records.codec import from_data, to_data
from gradexplain.records.lessons.interventions import GradChange, InterventionLesson
from gradexplain.records.numbers import fmt_value
from gradexplain.records.trace import TensorValue
from gradexplain.render.console import plain_text
from gradexplain.render.lessons.interventions import intervention_markdown, intervention_text
from tests.helpers.cli import SPECS
from tests.helpers.mdcheck import assert_markdown_well_formed, tables

Grads = tuple[torch.Tensor | None, ...]
# Registers plain-torch hooks on the classic example's two modules (returns the handle or None).
Register = Callable[["MyModule", "MyModule2"], object]
TWO_MODULES = (SPECS / "two_modules.yaml").read_text(encoding="utf-8")


@functools.cache
def lessons(spec_file: str) -> tuple[InterventionLesson, ...]:
    return intervention_lessons(load_spec(SPECS / spec_file))


def two_modules_with(interventions: str) -> tuple[InterventionLesson, ...]:
    """The classic two modules with the given `interventions:` YAML list items."""
    return intervention_lessons(load_spec_text(f"{TWO_MODULES}interventions:\n{interventions}"))


def as_tensor(value: TensorValue | None) -> torch.Tensor:
    assert value is not None and value.value is not None
    return torch.tensor(value.value, dtype=torch.float64)


def close(value: TensorValue | None, expected: torch.Tensor | None) -> bool:
    if expected is None:
        return value is None
    return torch.allclose(as_tensor(value), expected.detach().double(), rtol=1e-5, atol=1e-7)


def change(lesson: InterventionLesson, name: str, kind: str = "leaf") -> GradChange:
    found = [row for row in lesson.changes if row.name == name and row.kind == kind]
    assert len(found) == 1, (name, kind, [(row.name, row.kind) for row in lesson.changes])
    return found[0]


def leaf_sets(lesson: InterventionLesson) -> tuple[set[str], set[str]]:
    leaves = [row for row in lesson.changes if row.kind == "leaf"]
    return ({row.name for row in leaves if row.changed},
            {row.name for row in leaves if not row.changed})


# --- the articles' models in plain torch -------------------------------------------------------


class Model(nn.Module):
    """The hooks article's Model, as it writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.tensor([5.0]))

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        output = x1 * x2
        output = output * self.W
        return output


class MyModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.tensor([3.0, 4.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.p * x


class MyModule2(nn.Module):
    def __init__(self, t_hook: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        super().__init__()
        self.l = nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            self.l.weight.copy_(torch.tensor([[-0.1490, 0.0568]]))
        self.activation = nn.Sigmoid()
        self.t_hook = t_hook

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.l(x)
        if self.t_hook is not None:
            t.register_hook(self.t_hook)
        return self.activation(t)  # type: ignore[no-any-return]


def classic(register: Register,
            t_hook: Callable[[torch.Tensor], torch.Tensor] | None = None
            ) -> dict[str, torch.Tensor | None]:
    """The classic example's leaf gradients with the hooks `register` puts on the modules."""
    module, module2 = MyModule(), MyModule2(t_hook)
    register(module, module2)
    x = torch.tensor(5.0, requires_grad=True)
    module2(module(x)).backward()
    return {"x": x.grad, "module.p": module.p.grad, "module2.l.weight": module2.l.weight.grad}


def times(factor: float) -> Callable[..., Grads]:
    """A module hook (full, legacy or pre) returning its gradients times `factor`."""

    def hook(module: nn.Module, grads: Grads, *rest: Any) -> Grads:
        return tuple(None if grad is None else grad * factor for grad in grads)

    return hook


def recording(seen: list[tuple[Grads, Grads]], replace: Callable[[Grads], Grads]
              ) -> Callable[..., Grads]:
    """A module hook that records what torch passed it and what it returned."""

    def hook(module: nn.Module, grads: Grads, *rest: Any) -> Grads:
        result = replace(grads)
        seen.append((grads, result))
        return result

    return hook


def assert_leaves_match(lesson: InterventionLesson, expected: dict[str, torch.Tensor | None],
                        without: dict[str, torch.Tensor | None]) -> None:
    for name, grad in expected.items():
        row = change(lesson, name)
        assert close(row.with_, grad), (name, row.with_, grad)
        assert close(row.without, without[name]), (name, row.without, without[name])


# --- the article's last example: a full hook that normalizes grad_input -----------------------


def test_full_hook_normalize_matches_the_article_in_plain_torch() -> None:
    lesson = lessons("mul_param.yaml")[0]
    x1_value, x2_value = (tensor.detach().clone() for tensor in build(
        load_spec(SPECS / "mul_param.yaml")).inputs)

    def run(with_hook: bool) -> tuple[dict[str, torch.Tensor | None], list[tuple[Grads, Grads]]]:
        model = Model()
        seen: list[tuple[Grads, Grads]] = []

        def module_hook(module: nn.Module, grad_input: Grads, grad_output: Grads) -> Grads:
            # The article's hook: add the gradients up, divide each by the total.
            total: Any = 0
            for grad in grad_input:
                total += grad
            first, second = grad_input
            assert first is not None and second is not None
            result = (torch.divide(first, total), torch.divide(second, total))
            seen.append((grad_input, result))
            return result

        if with_hook:
            model.register_full_backward_hook(module_hook)
        x1 = x1_value.clone().requires_grad_(True)
        x2 = x2_value.clone().requires_grad_(True)
        model(x1, x2).backward()
        return {"x1": x1.grad, "x2": x2.grad, "model.W": model.W.grad}, seen

    without, _ = run(False)
    expected, seen = run(True)
    assert_leaves_match(lesson, expected, without)
    assert len(seen) == 1 and len(lesson.replaced) == 2
    (passed, returned), = seen
    for index, item in enumerate(lesson.replaced):
        assert item.argument == f"grad_input[{index}]"
        assert close(item.before, passed[index]) and close(item.after, returned[index])
    assert [item.flows_into for item in lesson.replaced] == ["x1", "x2"]
    assert sum(float(as_tensor(item.after).sum()) for item in lesson.replaced) == pytest.approx(1)

    changed, unchanged = leaf_sets(lesson)
    assert changed == {"x1", "x2"} and unchanged == {"model.W"}
    # Inside the module the input keeps its gradient; the replacement is what the caller's x1 gets.
    assert not change(lesson, "model.x1", "tensor").changed
    assert lesson.verified is True and lesson.max_abs_err < 1e-5
    assert all(row.verified for row in lesson.changes if row.kind == "leaf")
    assert "model.W.grad, computed inside model" in lesson.rule
    assert "never reaches its own module's parameters" in lesson.rule
    assert lesson.node == "BackwardHookFunctionBackward" and lesson.error is None


# --- the classic two modules: legacy, full pre-hook, tensor hook --------------------------------


def test_legacy_hook_scale_matches_plain_torch_and_changes_the_weight_gradient() -> None:
    lesson = lessons("intervene_legacy.yaml")[0]
    seen: list[tuple[Grads, Grads]] = []
    hook = recording(seen, lambda grads: tuple(None if g is None else g * 10 for g in grads))
    with pytest.warns(FutureWarning) as warned:
        expected = classic(lambda module, module2: module2.register_backward_hook(hook))
    without = classic(lambda module, module2: None)
    assert_leaves_match(lesson, expected, without)

    (passed, returned), = seen
    (item,) = lesson.replaced
    assert close(item.before, passed[0]) and close(item.after, returned[0])
    assert item.flows_into == "module2.t"  # dz/dt, the Sigmoid's input, not dz/dy
    changed, unchanged = leaf_sets(lesson)
    assert changed == {"x", "module.p", "module2.l.weight"} and unchanged == set()
    assert lesson.node == "SigmoidBackward0"
    assert lesson.verified is True
    assert "module2.l.weight is a parameter of module2, yet its gradient changed" in lesson.rule
    # torch's own warning for this hook, as the plain run above got it.
    torch_says = {str(item.message) for item in warned if item.category is FutureWarning}
    assert torch_says and torch_says <= set(lesson.warnings), (torch_says, lesson.warnings)


def test_the_full_hook_on_the_same_module_leaves_the_weight_gradient_alone() -> None:
    (lesson,) = two_modules_with("  - {hook: full_backward, on: module2, action: scale, "
                                 "factor: 10}\n")
    expected = classic(lambda module, module2: module2.register_full_backward_hook(times(10)))
    assert_leaves_match(lesson, expected, classic(lambda module, module2: None))
    changed, unchanged = leaf_sets(lesson)
    assert changed == {"x", "module.p"} and unchanged == {"module2.l.weight"}
    assert [item.flows_into for item in lesson.replaced] == ["y"]
    assert lesson.verified is True


def test_full_pre_hook_and_tensor_hook_match_plain_torch() -> None:
    pre, tensor = two_modules_with(
        "  - {hook: full_backward_pre, on: module2, action: scale, factor: 10}\n"
        "  - {hook: tensor, on: module2.t, action: clip, max: 0.1}\n")
    without = classic(lambda module, module2: None)
    expected = classic(lambda module, module2: module2.register_full_backward_pre_hook(times(10)))
    assert_leaves_match(pre, expected, without)
    assert leaf_sets(pre)[0] == {"x", "module.p", "module2.l.weight"}
    assert [item.flows_into for item in pre.replaced] == ["z"]

    expected = classic(lambda module, module2: None, t_hook=lambda g: g.clamp(max=0.1))
    assert_leaves_match(tensor, expected, without)
    (item,) = tensor.replaced
    assert item.argument == "grad" and close(item.after, torch.tensor([0.1]))
    assert pre.verified is True and tensor.verified is True


def test_a_module_called_twice_is_replaced_once_per_call_and_checked() -> None:
    spec = load_spec_text("""
inputs:
  x: {value: [1.0, -2.0], requires_grad: true}
modules:
  m:
    params: {p: [0.5, 0.25]}
    forward: {args: [a], steps: ["o = tanh(p * a)"]}
forward: ["u = m(x)", "v = m(u * 3.0)", "s = sum(v * v)"]
backward: s
interventions:
  - {hook: full_backward, on: m, action: scale, factor: 2}
""")
    (lesson,) = intervention_lessons(spec)

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p = nn.Parameter(torch.tensor([0.5, 0.25]))

        def forward(self, a: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.p * a)

    def run(hooked: bool) -> dict[str, torch.Tensor | None]:
        m = M()
        if hooked:
            m.register_full_backward_hook(times(2))
        x = torch.tensor([1.0, -2.0], requires_grad=True)
        v = m(m(x) * 3.0)
        (v * v).sum().backward()
        return {"x": x.grad, "m.p": m.p.grad}

    assert_leaves_match(lesson, run(True), run(False))
    # Backward meets the second call first; each call's replacement flows into its own input.
    assert [(item.call, item.flows_into) for item in lesson.replaced] == [(2, "m.a@2"), (1, "x")]
    assert lesson.verified is True


# --- the independent check ---------------------------------------------------------------------


def test_the_check_catches_a_hook_that_returns_other_than_it_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    honest = intervention_runs.ReplacingHook.replaced

    def lying(self: intervention_runs.ReplacingHook, grads: Grads, call: int) -> Grads:
        recorded = honest(self, grads, call)
        return tuple(None if grad is None else grad * 3 for grad in recorded)

    monkeypatch.setattr(intervention_runs.ReplacingHook, "replaced", lying)
    (lesson,) = intervention_lessons(load_spec(SPECS / "intervene_legacy.yaml"))
    assert lesson.verified is False
    assert {row.name for row in lesson.failed_checks} == {"x", "module.p", "module2.l.weight"}
    assert lesson.max_abs_err > 1
    assert "✗ FAILED" in plain_text(intervention_text((lesson,)))


# Gradients of 1e-9: doubling them is a change however small they are.
TINY_GRADIENTS = """
name: tiny_gradients
seed: 0
inputs:
  x: {value: [1.0, 2.0], requires_grad: true}
forward:
  - "y = x * 0.000000001"
  - "s = sum(y)"
backward: s
interventions:
  - {hook: tensor, on: y, action: scale, factor: 2}
"""


def test_a_change_to_tiny_gradients_is_a_change() -> None:
    def x_grad(factor: float) -> torch.Tensor:
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        y = x * 0.000000001
        y.register_hook(lambda grad: grad * factor)
        y.sum().backward()
        assert x.grad is not None
        return x.grad

    without, with_ = x_grad(1.0), x_grad(2.0)
    assert not torch.allclose(with_, without, rtol=1e-4, atol=0.0)
    (lesson,) = intervention_lessons(load_spec_text(TINY_GRADIENTS))
    row = change(lesson, "x")
    for recorded, torch_grad in ((row.without, without), (row.with_, with_)):
        assert torch.allclose(as_tensor(recorded), torch_grad.double(), rtol=1e-6, atol=0.0)
    assert row.changed and row.verified
    assert "Changed: x.grad" in lesson.rule and "Unchanged" not in lesson.rule


# --- replacements torch refuses --------------------------------------------------------------


def torch_error(register: Register) -> str:
    with pytest.raises(RuntimeError) as caught:
        classic(register)
    return str(caught.value).splitlines()[0]


def test_wrong_length_and_wrong_shape_messages_come_from_torch() -> None:
    wrong_length, wrong_shape = lessons("wrong_replacement.yaml")

    def too_many(module: nn.Module, grad_input: Grads, grad_output: Grads) -> Grads:
        return grad_input + (grad_input[-1],)

    def module_hook(module: nn.Module, grad_input: Grads, grad_output: Grads) -> Grads:
        first = grad_input[0]
        assert first is not None
        return (torch.cat([first.flatten(), first.new_zeros(1)]),) + grad_input[1:]

    assert wrong_length.error == torch_error(
        lambda module, module2: module2.register_full_backward_hook(too_many))
    with pytest.warns(FutureWarning):
        assert wrong_shape.error == torch_error(
            lambda module, module2: module.register_backward_hook(module_hook))
    assert wrong_length.expected_error and wrong_shape.expected_error
    assert wrong_length.changes == () and wrong_shape.changes == ()
    assert wrong_length.error_rule == ("a full backward hook returns one gradient per positional "
                                       "input of module2: (g_x,) here, 1 value, not 2")
    assert wrong_shape.error_rule == ("each replacement must have the shape of what it replaces: "
                                      "grad_input[0] has shape [2], the hook returned shape [3]")


def test_legacy_wrong_length_names_the_node_and_its_edges() -> None:
    (lesson,) = two_modules_with("  - {hook: backward, on: module, action: wrong_length, "
                                 "expect_error: incorrect number of values}\n")

    def module_hook(module: nn.Module, grad_input: Grads, grad_output: Grads) -> Grads:
        return grad_input + (grad_input[-1],)  # torch's message quotes the hook's name

    with pytest.warns(FutureWarning):
        torch_says = torch_error(lambda module, module2: module.register_backward_hook(module_hook))
    assert lesson.error == torch_says
    assert lesson.error_rule == ("a legacy backward hook returns one gradient per next_functions "
                                 "edge of MulBackward0, the node it sits on: (g_p, g_x) here, "
                                 "2 values, not 3")


def test_an_expected_error_that_torch_does_not_raise_is_an_error() -> None:
    with pytest.raises(ExpectationError, match="but the backward succeeded"):
        two_modules_with("  - {hook: full_backward, on: module2, action: zero, "
                         "expect_error: size}\n")


@pytest.mark.parametrize(("item", "message"), [
    ("{hook: tensor, on: y, action: wrong_length, expect_error: x}",
     "wrong_length needs a hook that returns a tuple"),
    ("{hook: full_backward, on: module2, action: wrong_shape}",
     "the wrong_shape action returns what torch refuses; give `expect_error:`"),
])
def test_the_spec_refuses_wrong_actions_it_cannot_teach(item: str, message: str) -> None:
    with pytest.raises(SpecSchemaError, match=message.replace("(", r"\(")):
        load_spec_text(f"{TWO_MODULES}interventions:\n  - {item}\n")


# --- data and renderers ------------------------------------------------------------------------


def all_lessons() -> tuple[InterventionLesson, ...]:
    return (lessons("mul_param.yaml") + lessons("intervene_legacy.yaml")
            + lessons("wrong_replacement.yaml"))


def test_lessons_survive_the_codec_as_strict_json() -> None:
    data = to_data(all_lessons())
    text = json.dumps(data, allow_nan=False)
    assert from_data(tuple[InterventionLesson, ...], json.loads(text)) == all_lessons()


def test_text_shows_before_after_and_the_rule() -> None:
    text = plain_text(intervention_text(all_lessons()), 100)
    assert all(len(line) <= 100 for line in text.splitlines())
    legacy = lessons("intervene_legacy.yaml")[0]
    (item,) = legacy.replaced
    row = next(line for line in text.splitlines() if "module2.t" in line and "grad_input" in line)
    assert fmt_value(item.before) in row and fmt_value(item.after) in row
    weight = change(legacy, "module2.l.weight")
    row = next(line for line in text.splitlines() if line.strip().startswith("module2.l.weight"))
    assert fmt_value(weight.without) in row and fmt_value(weight.with_) in row
    assert "changed" in row and "✓" in row
    flat = " ".join(text.split())
    assert "rule: register_full_backward_hook on model replaces grad_input" in flat
    wrong_length = lessons("wrong_replacement.yaml")[0]
    assert wrong_length.error is not None  # torch's words (see the test above)
    assert f"torch: {' '.join(wrong_length.error.split())}" in flat
    assert "rule: a full backward hook returns one gradient per positional input" in flat
    assert "as the spec expected ✓" in flat
    assert plain_text(intervention_text(())) == ""


def test_markdown_is_well_formed_with_a_table_per_lesson() -> None:
    markdown = intervention_markdown(all_lessons(), 2)
    assert_markdown_well_formed(markdown)
    assert markdown.startswith("## Interventions")
    assert markdown.count("\n### ") == len(all_lessons())
    found = tables(markdown)
    assert [header for header, _ in found].count(
        ["gradient", "without the hook", "with the hook", "changed", "check"]) == 2
    assert intervention_markdown((), 2) == ""


def test_new_specs_say_what_they_teach() -> None:
    for name in ("intervene_legacy.yaml", "wrong_replacement.yaml"):
        spec = load_spec(Path(SPECS / name))
        assert spec.name == name.removesuffix(".yaml") and len(spec.about) > 40
        assert spec.interventions


def test_a_replacement_that_is_not_finite_is_shown_and_left_unchecked() -> None:
    (lesson,) = intervention_lessons(load_spec_text("""
inputs:
  x: {value: [1.0, -1.0], requires_grad: true}
  c: [1.0, -1.0]
forward: ["y = x * 2", "s = sum(y * c)"]
backward: s
interventions:
  - {hook: tensor, on: y, action: normalize}
"""))
    # y's gradient [1, -1] sums to 0: normalizing it divides by 0, as torch does.
    assert lesson.verified is None
    assert "Not checked: the replacement is not finite" in lesson.rule
    text = plain_text(intervention_text((lesson,)))
    assert "[inf, -inf]" in text  # a cell rich must not read as markup
