"""A call torch refuses in the full pass alone is a failed check, not a clean walk.

A model's own full backward hook runs in the full pass only (torch refuses legacy and full hooks
on one module). One that returns a gradient of another shape, or too many, makes torch raise in
that pass's backward: the walk said "all checks verified" and exited 0, every full hook "(does
not fire)", and the error nowhere. The calls the walk lists are the legacy pass's.

Torch is the oracle: each model's backward is run here in plain PyTorch with only its own hooks,
and must raise; the walk must then show torch's error under the full pass and exit 1.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from jsonschema import Draft202012Validator
from torch import nn

from gradexplain.api import explain
from gradexplain.records.walk import PASS_FAILURE_CLAIM
from gradexplain.schemas import load_schema
from tests.helpers.pycli import run_separately

pytestmark = pytest.mark.filterwarnings("ignore:Using a non-full backward hook:FutureWarning")

MODELS = '''
import torch
from torch import nn


def wrong_shape_pre_hook():
    model = nn.Sequential(nn.Linear(3, 2), nn.Tanh())
    model[0].register_full_backward_pre_hook(lambda module, grad: (torch.zeros(9, 9),))
    return model


def too_many_grads():
    model = nn.Sequential(nn.Linear(3, 2))
    model[0].register_full_backward_hook(lambda module, gi, go: (gi[0], gi[0], gi[0]))
    return model
'''


def _wrong_shape_pre_hook() -> nn.Module:
    model = nn.Sequential(nn.Linear(3, 2), nn.Tanh())
    model[0].register_full_backward_pre_hook(lambda module, grad: (torch.zeros(9, 9),))
    return model


def _three_of_the_first(module: nn.Module, grad_input: Any, grad_output: Any) -> Any:
    return (grad_input[0],) * 3


def _first_column(module: nn.Module, grad_input: Any, grad_output: Any) -> Any:
    return (grad_input[0][:, :1],)


def _twice_the_first(module: nn.Module, grad_input: Any, grad_output: Any) -> Any:
    return (grad_input[0],) * 2


def _too_many_grads() -> nn.Module:
    model = nn.Sequential(nn.Linear(3, 2))
    model[0].register_full_backward_hook(_three_of_the_first)
    return model


def _wrong_shape_full_hook() -> nn.Module:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model[2].register_full_backward_hook(_first_column)
    return model


CASES: dict[str, Callable[[], nn.Module]] = {
    "a pre-hook returning a gradient of another shape": _wrong_shape_pre_hook,
    "a full hook returning three gradients for one input": _too_many_grads,
    "a full hook returning a gradient of another shape": _wrong_shape_full_hook,
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_call_torch_refuses_in_the_full_pass_alone_fails_the_walk(name: str) -> None:
    torch.manual_seed(0)
    model = CASES[name]()
    with pytest.raises(RuntimeError) as raised:
        model(torch.randn(2, 3, requires_grad=True)).sum().backward()

    explanation = explain(model, (2, 3))
    full = explanation.walk.passes[1]
    assert full.mode == "full" and len(full.failed_runs) == 1
    failure = full.failed_runs[0]
    assert (failure.run, failure.kind, failure.of) == (1, "backward", "loss")
    assert failure.error.category == type(raised.value).__name__
    assert explanation.walk.passes[0].failed_runs == ()  # the legacy pass ran the call
    assert all(step.error is None for step in explanation.walk.runs)
    failed = explanation.failures()
    assert [item.claim for item in failed] == [PASS_FAILURE_CLAIM]
    assert failed[0].mode == "full"


def test_the_command_shows_the_error_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "hooked.py").write_text(MODELS, encoding="utf-8")
    for factory in ("wrong_shape_pre_hook", "too_many_grads"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            namespace: dict[str, Any] = {}
            exec(MODELS, namespace)  # the file's own model, run in plain torch: it raises
            model = namespace[factory]()
            assert isinstance(model, nn.Module)
            with pytest.raises(RuntimeError) as raised:
                model(torch.randn(2, 3, requires_grad=True)).sum().backward()
        # torch's own first line, whatever its words: the walk passes it on.
        words = " ".join(str(raised.value).strip().splitlines()[0].split())
        text = run_separately("walk", f"{tmp_path / 'hooked.py'}:{factory}", "--input", "2x3")
        assert text.code == 1, text.stderr[-2000:]
        assert "FAILED" in text.stdout and "in this pass, not as in the legacy" in text.stdout
        assert words in " ".join(text.stdout.split())
        assert "Traceback" not in text.stderr
        doc = run_separately("walk", f"{tmp_path / 'hooked.py'}:{factory}", "--input", "2x3",
                             "--format", "json")
        assert doc.code == 1
        data = json.loads(doc.stdout)
        Draft202012Validator(load_schema("walk")).validate(data)
        legacy, full = data["passes"]
        assert "failed_runs" not in legacy
        (entry,) = full["failed_runs"]
        assert entry["run"] == 1 and entry["kind"] == "backward" and entry["category"]
        report = run_separately("report", f"{tmp_path / 'hooked.py'}:{factory}", "--input",
                                "2x3", "-o", str(tmp_path / f"{factory}.md"))
        assert report.code == 1
        assert "in this pass, not as in the legacy" in (
            tmp_path / f"{factory}.md").read_text(encoding="utf-8")


def test_a_call_the_legacy_pass_alone_fails_stays_the_walks_own_failed_call() -> None:
    """The legacy pass's calls are the walk's `runs`: a failure there is said there, once,
    and the full pass, which ran the call, has none of its own."""
    model = nn.Sequential(nn.Linear(3, 2), nn.Tanh())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model[1].register_backward_hook(_twice_the_first)
        with pytest.raises(RuntimeError):
            model(torch.randn(2, 3, requires_grad=True)).sum().backward()
    explanation = explain(model, (2, 3))
    (step,) = explanation.walk.runs
    assert step.error is not None and step.error.category == "RuntimeError"
    assert all(walk_pass.failed_runs == () for walk_pass in explanation.walk.passes)
    assert len(explanation.failures()) == 1


def test_diff_says_why_the_full_hook_never_fired() -> None:
    """diff said "full never fires: no gradient reached 0's inputs", where torch raised in
    the full pass before the hook could fire (the gradient did reach it in plain torch's
    legacy run, done here)."""
    torch.manual_seed(0)
    model = _wrong_shape_pre_hook()
    explanation = explain(model, (2, 3))
    texts = [finding.text for module in explanation.diff().modules
             for finding in module.findings() if "full never fires" in finding.text]
    assert texts
    assert all("torch raised RuntimeError in the full pass's run 1" in text for text in texts)
    assert not any("no gradient reached" in text for text in texts)
    legacy_model = _wrong_shape_pre_hook()
    layer = next(iter(legacy_model.children()))
    seen: list[torch.Tensor] = []

    def record(module: nn.Module, grad_input: Any, grad_output: Any) -> None:
        seen.append(grad_output[0])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer._backward_pre_hooks.clear()  # the model's own full hook: not legacy's
        layer.register_backward_hook(record)
        legacy_model(torch.randn(2, 3, requires_grad=True)).sum().backward()
    assert seen  # a gradient reaches the module
