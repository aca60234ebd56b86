"""A Python model's own hooks stay, run where torch allows, and are shown (issue 17 item 8).

Torch is the oracle: each test runs the model (tests/helpers/userhook_models.py) in plain PyTorch
with only its own hooks, and compares what each hook received, and the final `.grad`s, with what
gradexplain recorded. Values a user's hook changed must be marked as changed and never checked
as a derivative; everything else must be verified; the user's model must come back untouched.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module

from gradexplain.api import Explanation, explain
from tests.helpers import userhook_models as models
from tests.helpers.pycli import CLI

pytestmark = pytest.mark.filterwarnings("ignore:Using a non-full backward hook:FutureWarning")

JSON = dict[str, Any]
MODELS = "tests/helpers/userhook_models.py"
# Which pass runs each user hook: torch refuses legacy and full backward hooks on one module.
RUNS_IN: dict[str, tuple[str, ...]] = {
    "log_grads": ("legacy",), "log_full": ("full",), "double_input_grad": ("full",),
    "triple_output": ("legacy", "full"), "double_grad": ("legacy", "full"),
    "log_inputs": ("legacy", "full"), "log_grad_output": ("full",),
    "log_accumulated": ("legacy", "full"),
}


def _x() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(2, 3, generator=generator)


def hook_state(model: nn.Module) -> list[Any]:
    """Every hook table and flag of the model and its parameters, and the parameters' .grad."""
    state: list[Any] = []
    for name, module in model.named_modules():
        tables = (module._forward_pre_hooks, module._forward_hooks, module._backward_pre_hooks,
                  module._backward_hooks, module._forward_hooks_with_kwargs,
                  module._forward_pre_hooks_with_kwargs)
        state.append((name, module._is_full_backward_hook,
                      [list(table.items()) for table in tables]))
    for name, parameter in model.named_parameters():
        state.append((name, list((parameter._backward_hooks or {}).items()),
                      list((parameter._post_accumulate_grad_hooks or {}).items()),
                      parameter.grad))
    return state


def global_state() -> list[Any]:
    return [list(getattr(torch_module, name).items()) for name in (
        "_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
        "_global_backward_hooks")] + [torch_module._global_is_full_backward_hook]


def plain_run(model: nn.Module) -> tuple[dict[str, list[tuple[torch.Tensor | None, ...]]],
                                         dict[str, torch.Tensor | None]]:
    """The model in plain PyTorch, with its own hooks: what each hook received, and .grad."""
    models.CALLS.clear()
    x = _x().requires_grad_()
    model(x).sum().backward()
    calls: dict[str, list[tuple[torch.Tensor | None, ...]]] = {}
    for name, values in models.CALLS:
        calls.setdefault(name, []).append(values)
    grads = {"input": x.grad, **{name: parameter.grad
                                 for name, parameter in model.named_parameters()}}
    model.zero_grad(set_to_none=True)
    return calls, grads


def hook_free_grads(model: nn.Module) -> dict[str, torch.Tensor | None]:
    """The true gradients: a copy with its backward hooks taken off (forward hooks stay; the
    copy has no tensor hooks: Parameter's deepcopy drops them)."""
    bare = copy.deepcopy(model)
    for module in bare.modules():
        module._backward_hooks.clear()
        module._backward_pre_hooks.clear()
        module._is_full_backward_hook = None
    x = _x().requires_grad_()
    bare(x).sum().backward()
    return {"input": x.grad, **{name: parameter.grad
                                for name, parameter in bare.named_parameters()}}


@pytest.fixture(scope="module")
def walked() -> Iterator[Callable[[str], tuple[nn.Module, Explanation, list[Any]]]]:
    """Each model, walked once: (the user's model, the walk, its hook state before)."""
    done: dict[str, tuple[nn.Module, Explanation, list[Any]]] = {}

    def walk(name: str) -> tuple[nn.Module, Explanation, list[Any]]:
        if name not in done:
            model = getattr(models, name)()
            before = hook_state(model)
            done[name] = (model, explain(model, _x().requires_grad_()), before)
        return done[name]

    yield walk


def user_events(doc: JSON, mode: str, function: str) -> list[JSON]:
    walk_pass = next(item for item in doc["passes"] if item["mode"] == mode)
    return [event for event in walk_pass["events"] if event.get("user") == function]


def known(tensor: torch.Tensor | None) -> torch.Tensor:
    assert tensor is not None
    return tensor


def as_tensor(value: Any) -> torch.Tensor | None:
    return None if value is None else torch.tensor(value, dtype=torch.float32)


ALL = ["legacy_log", "full_double", "forward_triple", "param_double", "logging_only", "mixed",
       "sticky"]


@pytest.mark.parametrize("name", ALL)
def test_every_check_verified_or_marked_changed(walked: Callable[..., Any], name: str) -> None:
    model, explanation, before = walked(name)
    assert explanation.failures() == []
    for walk_pass in explanation.walk.passes:
        for event in walk_pass.events:
            for arg in event.args:
                if arg.meaning is not None and arg.check is None:
                    assert arg.meaning.modified_by is not None, (walk_pass.mode, event.seq)
    assert hook_state(model) == before  # the user's model comes back untouched


@pytest.mark.parametrize("name", ALL)
def test_user_hooks_receive_what_plain_torch_gives_them(walked: Callable[..., Any],
                                                        name: str) -> None:
    model, explanation, _ = walked(name)
    doc = explanation.json()
    calls, _ = plain_run(model)
    assert calls or name == "sticky"
    for function, expected in calls.items():
        for mode in RUNS_IN[function]:
            events = user_events(doc, mode, function)
            assert len(events) == len(expected), (mode, function)
            for event, values in zip(events, expected, strict=True):
                assert len(event["args"]) == len(values)
                for arg, value in zip(event["args"], values, strict=True):
                    got = as_tensor(arg["value"])
                    assert (got is None) == (value is None), (mode, function, arg["name"])
                    if got is not None:
                        torch.testing.assert_close(got, value)
        other = {"legacy", "full"} - set(RUNS_IN[function])
        for mode in other:
            assert user_events(doc, mode, function) == []
            lines = [hook for hook in doc["passes"][0 if mode == "legacy" else 1]["user_hooks"]
                     if hook["function"] == function]
            assert lines and not any(hook["ran"] for hook in lines)
            assert all(hook["why"] for hook in lines)


@pytest.mark.parametrize("name", ["legacy_log", "logging_only", "mixed", "sticky",
                                  "forward_triple"])
def test_hooks_that_only_look_change_nothing(walked: Callable[..., Any], name: str) -> None:
    model, explanation, _ = walked(name)
    _, grads = plain_run(model)
    for walk_pass in explanation.json()["passes"]:
        assert set(walk_pass["grads"]) == set(grads)
        for leaf, value in walk_pass["grads"].items():
            torch.testing.assert_close(as_tensor(value), grads[leaf])
        for event in walk_pass["events"]:
            assert not event.get("changed", False) or event["phase"] == "forward"


def test_a_tensor_hook_doubling_a_gradient_is_shown_changed(walked: Callable[..., Any]) -> None:
    model, explanation, _ = walked("param_double")
    _, grads = plain_run(model)
    true = hook_free_grads(model)
    # the oracle itself: with the hook, .grad is twice the true gradient
    torch.testing.assert_close(grads["0.weight"], 2 * known(true["0.weight"]))
    for walk_pass in explanation.walk.passes:
        final = {grad.name: grad for grad in walk_pass.grads}
        assert final["0.weight"].modified_by == "double_grad"
        assert final["0.weight"].check is None
        for leaf, grad in final.items():
            assert grad.value is not None and grad.value.value is not None
            torch.testing.assert_close(torch.tensor(grad.value.value), grads[leaf])
            if leaf != "0.weight":
                assert grad.check is not None and grad.check.verified
        calls = [event for event in walk_pass.events if event.user == "double_grad"]
        assert len(calls) == 1 and calls[0].changed and calls[0].returned is not None
        returned = calls[0].returned[0].value
        assert returned is not None
        torch.testing.assert_close(torch.tensor(returned.value), grads["0.weight"])


def test_a_full_hook_doubling_grad_input_marks_what_is_below_it(
        walked: Callable[..., Any]) -> None:
    model, explanation, _ = walked("full_double")
    _, with_hook = plain_run(model)
    true = hook_free_grads(model)
    legacy, full = explanation.walk.passes
    below, above = {"input", "0.weight", "0.bias"}, {"2.weight", "2.bias"}
    for grad in full.grads:
        assert grad.value is not None
        torch.testing.assert_close(torch.tensor(grad.value.value), with_hook[grad.name])
        if grad.name in below:
            assert grad.modified_by == "double_input_grad" and grad.check is None
            assert not torch.allclose(known(with_hook[grad.name]), known(true[grad.name]))
        else:
            assert grad.name in above and grad.check is not None and grad.check.verified
    changed_at = min(event.seq for event in full.events if event.changed and event.user)
    for event in full.events:  # what is not below the hook is checked, after it too
        for arg in event.args:
            if arg.meaning is not None and arg.meaning.wrt in above | {"output"}:
                assert arg.meaning.modified_by is None, (event.seq, arg.name)
                assert arg.check is not None and arg.check.verified
            elif arg.meaning is not None and arg.meaning.modified_by is not None:
                assert event.seq > changed_at
    for grad in legacy.grads:  # the legacy pass cannot run the full hook: true gradients
        assert grad.value is not None and grad.check is not None and grad.check.verified
        torch.testing.assert_close(torch.tensor(grad.value.value), true[grad.name])


def test_a_forward_hook_is_part_of_the_function(walked: Callable[..., Any]) -> None:
    """Its replaced output is what the model computes: labels stay true derivatives, checked."""
    model, explanation, _ = walked("forward_triple")
    _, grads = plain_run(model)
    bare = copy.deepcopy(model)
    bare[1]._forward_hooks.clear()
    x = _x().requires_grad_()
    bare(x).sum().backward()
    # the hook does change the function
    assert not torch.allclose(known(x.grad), known(grads["input"]))
    checked = [arg.check for walk_pass in explanation.walk.passes
               for event in walk_pass.events for arg in event.args if arg.check is not None]
    assert checked and all(check.verified for check in checked)


def test_global_module_hooks_are_left_out_and_put_back() -> None:
    seen: list[str] = []

    def global_full(module: nn.Module, grad_input: Any, grad_output: Any) -> None:
        seen.append(type(module).__name__)

    handle = nn.modules.module.register_module_full_backward_hook(global_full)
    try:
        before = global_state()
        explanation = explain(models.legacy_log(), _x().requires_grad_())
        assert global_state() == before
        assert explanation.failures() == []
        for walk_pass in explanation.walk.passes:
            found = [hook for hook in walk_pass.user_hooks if hook.scope == "global"]
            assert [(hook.function, hook.ran) for hook in found] == [("global_full", False)]
            assert found[0].why
        assert seen == []
        models.legacy_log()(_x().requires_grad_()).sum().backward()
        assert seen  # still registered, and still firing, afterwards
    finally:
        handle.remove()
        torch_module._global_is_full_backward_hook = None


def test_walk_on_the_command_line(cli: CLI) -> None:
    result = cli("walk", f"{MODELS}:mixed", "--input", "2x3")
    assert result.code == 0, result.stderr
    assert ("your legacy backward hook log_grads on 0 is not run in the full pass: torch "
            "refuses legacy and full backward hooks on one module") in " ".join(
                result.stdout.split())
    assert "your hook log_full" in result.stdout
    for name in ("full_double", "param_double", "forward_triple"):
        result = cli("walk", f"{MODELS}:{name}", "--input", "2x3", "-f", "markdown")
        assert result.code == 0, result.stderr
        assert "your hook" in result.stdout
