"""Python models: `gradexplain walk FILE.py:NAME` / `pkg.module:NAME` and `gradexplain.explain()`.

Torch is the oracle throughout: each test rebuilds the model with the same factory under
`torch.manual_seed(0)` and the same inputs (`torch.manual_seed(0); torch.randn(...)`, one draw
per input in order), runs it in plain PyTorch with its own `register_backward_hook` /
`register_full_backward_hook` hooks or a plain `loss.backward()`, and compares what torch handed
those hooks with what gradexplain recorded and labelled.

Themes, in order: 1 labels and values against torch, 2 names and reproducibility, 3 the user's
model left untouched, 4 the command-line forms, 5 bad input, 6 a deeper model and value
summaries, and last the bugs found while writing them, fixed, each with its reproduction.

The command line runs in-process through `gradexplain.cli.main` (the real entry point, errors
and exit codes included) to keep the file fast; a handful of runs that only a separate process
can show (byte-identical output across processes, the console script finding
`tests.helpers.pymodels` from the working directory, no traceback on stderr) run as real
subprocesses, side by side.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import gradexplain
from gradexplain import api
from gradexplain.api import Explanation, explain
from gradexplain.cli import main
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import LabelledArg, LabelledEvent, Walk
from gradexplain.render.console import plain_text
from tests.helpers import pymodels
from tests.helpers.cli import REPO, Result
from tests.helpers.mdcheck import assert_markdown_well_formed
from tests.helpers.messages import raised_by

PYMODELS = "tests/helpers/pymodels.py"
JSON = dict[str, Any]
Shape = tuple[int, ...]
Factory = Callable[[], nn.Module]

# --- oracle: the same model and inputs in plain PyTorch -----------------------------------------


@contextmanager
def seeded(seed: int = 0) -> Iterator[None]:
    """torch.manual_seed(seed) inside, the test process's own RNG restored after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def torch_model(make: Factory) -> nn.Module:
    """The model gradexplain loads: the factory called under torch.manual_seed(0)."""
    with seeded():
        return make()


def torch_inputs(*shapes: Shape) -> list[torch.Tensor]:
    """What `--input` makes: torch.manual_seed(0), then one torch.randn per input, in order."""
    with seeded():
        return [torch.randn(shape) for shape in shapes]


def leaves(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [tensor.detach().clone().requires_grad_() for tensor in tensors]


def loss_of(output: torch.Tensor | tuple[torch.Tensor, ...], loss: str) -> torch.Tensor:
    """`loss = output.sum()` (or `.mean()`); for a tuple, the sum of each part's."""
    parts = output if isinstance(output, tuple) else (output,)
    reduced = [part.sum() if loss == "sum" else part.mean() for part in parts]
    total = reduced[0]
    for part in reduced[1:]:
        total = total + part
    return total


@dataclass(frozen=True)
class PlainRun:
    """A hook-free forward and `loss.backward()`: the model with its `.grad`s, the inputs with
    theirs, and every module's output with its gradient (kept by retain_grad)."""

    model: nn.Module
    inputs: list[torch.Tensor]
    outputs: dict[str, torch.Tensor]

    def grads(self, input_names: Sequence[str]) -> dict[str, torch.Tensor]:
        found = {name: tensor.grad for name, tensor in zip(input_names, self.inputs, strict=True)}
        found.update({name: param.grad for name, param in self.model.named_parameters()})
        assert all(grad is not None for grad in found.values())
        return {name: grad for name, grad in found.items() if grad is not None}

    def output_grad(self, path: str) -> torch.Tensor:
        grad = self.outputs[path].grad
        assert grad is not None, path
        return grad


def plain_run(make: Factory, inputs: Sequence[torch.Tensor], loss: str = "sum") -> PlainRun:
    model = torch_model(make)
    tensors = leaves(inputs)
    outputs: dict[str, torch.Tensor] = {}

    def keep(path: str) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                output.retain_grad()
                outputs[path] = output
        return hook

    handles = [module.register_forward_hook(keep(path)) for path, module in model.named_modules()]
    loss_of(model(*tensors), loss).backward()
    for handle in handles:
        handle.remove()
    return PlainRun(model, tensors, outputs)


Grads = tuple[torch.Tensor | None, ...]


@dataclass(frozen=True)
class HookCall:
    """What one torch module backward hook received (pre hooks: grad_output only)."""

    grad_input: Grads
    grad_output: Grads


def _copied(grads: Grads) -> Grads:
    return tuple(None if grad is None else grad.detach().clone() for grad in grads)


def torch_hook_calls(make: Factory, inputs: Sequence[torch.Tensor], mode: str,
                     loss: str = "sum") -> dict[tuple[str, str], list[HookCall]]:
    """Register, in plain torch, the module backward hooks of one gradexplain pass on every
    module (legacy: register_backward_hook; full: register_full_backward_pre_hook and
    register_full_backward_hook), run forward and backward once, and return what each hook
    received, keyed by (hook kind as gradexplain names it, module path)."""
    model = torch_model(make)
    calls: dict[tuple[str, str], list[HookCall]] = defaultdict(list)

    def backward(kind: str, path: str) -> Callable[[nn.Module, Grads, Grads], None]:
        def hook(module: nn.Module, grad_input: Grads, grad_output: Grads) -> None:
            calls[(kind, path)].append(HookCall(_copied(grad_input), _copied(grad_output)))
        return hook

    def pre(path: str) -> Callable[[nn.Module, Grads], None]:
        def hook(module: nn.Module, grad_output: Grads) -> None:
            calls[("full_backward_pre", path)].append(HookCall((), _copied(grad_output)))
        return hook

    for path, module in model.named_modules():
        if mode == "legacy":
            module.register_backward_hook(backward("backward", path))
        else:
            module.register_full_backward_pre_hook(pre(path))
            module.register_full_backward_hook(backward("full_backward", path))
    with warnings.catch_warnings():
        # "Using a non-full backward hook when the forward contains multiple autograd Nodes":
        # exactly the legacy behaviour under test.
        warnings.simplefilter("ignore")
        loss_of(model(*leaves(inputs)), loss).backward()
    return dict(calls)


# --- reading what gradexplain recorded ----------------------------------------------------------


def events(walk: Walk, mode: str, hook: str, target: str | None = None) -> list[LabelledEvent]:
    found = [item for item in walk.passes if item.mode == mode]
    assert len(found) == 1, f"no {mode} pass"
    return [event for event in found[0].events
            if event.hook == hook and (target is None or event.target == target)]


def event(walk: Walk, mode: str, hook: str, target: str) -> LabelledEvent:
    found = events(walk, mode, hook, target)
    assert len(found) == 1, f"[{mode}] {len(found)} {hook} events on {target!r}"
    return found[0]


def args_of(item: LabelledEvent, prefix: str) -> list[LabelledArg]:
    found = [arg for arg in item.args if arg.name.startswith(prefix + "[")]
    assert [arg.name for arg in found] == [f"{prefix}[{i}]" for i in range(len(found))]
    return found


def labels(args: Sequence[LabelledArg]) -> list[str | None]:
    return [None if arg.meaning is None else arg.meaning.text for arg in args]


def recorded(value: TensorValue | None) -> torch.Tensor:
    """A recorded value, in full (these small models are under the 1,000-value limit)."""
    assert value is not None and value.summary is None and value.value is not None, value
    return torch.tensor(value.value, dtype=torch.float64).reshape(value.shape)


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    want64 = want.detach().to(torch.float64)
    assert got.shape == want64.shape, f"{what}: shape {tuple(got.shape)}, torch {want64.shape}"
    assert torch.allclose(got, want64, rtol=1e-6, atol=1e-7), (
        f"{what}: recorded {got.tolist()}, torch says {want64.tolist()}")


def assert_args_equal(args: Sequence[LabelledArg], grads: Grads, what: str) -> None:
    """Recorded hook arguments equal what torch's own hook received, None for None."""
    assert len(args) == len(grads), f"{what}: {len(args)} arguments, torch gave {len(grads)}"
    for arg, grad in zip(args, grads, strict=True):
        if grad is None:
            assert arg.value is None and arg.meaning is None, f"{what} {arg.name}: torch: None"
        else:
            assert_close(recorded(arg.value), grad, f"{what} {arg.name}")


def input_names(walk: Walk) -> list[str]:
    """The inputs' names as the walk recorded them (the leaves that are not parameters)."""
    grads = walk.passes[0].grads
    return [grad.name for grad in grads if "." not in grad.name]


# --- the command line ---------------------------------------------------------------------------


CLI = Callable[..., Result]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    """Run `gradexplain ARGS` in this process, from the repository root, through the real entry
    point (`main`: errors become `error: ...` and an exit code exactly as in a shell)."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")

    def run(*args: str) -> Result:
        monkeypatch.setattr(sys, "argv", ["gradexplain", *args])
        capsys.readouterr()
        code: int = 0
        try:
            main()
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else int(done.code is not None)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def walk_json(cli: CLI, *args: str) -> JSON:
    result = cli("walk", *args, "-f", "json")
    assert result.code == 0, result.stderr
    doc: JSON = json.loads(result.stdout)
    return doc


def json_event(doc: JSON, hook: str, target: str) -> JSON:
    """The one `hook` event on `target` in the legacy pass of a walk document."""
    found = [item for item in doc["passes"][0]["events"]
             if item["hook"] == hook and item["target"] == target]
    assert len(found) == 1, (hook, target, len(found))
    item: JSON = found[0]
    return item


def without_spec(doc: JSON) -> JSON:
    return {key: value for key, value in doc.items() if key != "spec"}


class Background:
    """Commands that need a process of their own, started together when the file's first test
    starts and running while the in-process tests run; `result` waits for one."""

    def __init__(self) -> None:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
        module_form = ("walk", "tests.helpers.pymodels:make_mlp", "--input", "4x3", "-f", "json")
        commands = {
            # the console script does not have the working directory on sys.path
            "script": ["gradexplain", *module_form],
            "module": [sys.executable, "-m", "gradexplain", *module_form],
            "forward_raises": [sys.executable, "-m", "gradexplain", "walk",
                               f"{PYMODELS}:make_mlp", "--input", "4x5"],
            # the package's lazy `explain` in a fresh interpreter, before anything else loaded
            "import": [sys.executable, "-c", "from gradexplain import Explanation, explain\n"
                       "print(explain.__module__, explain.__name__, Explanation.__module__)"],
        }
        self.processes = {
            name: subprocess.Popen(command, cwd=REPO, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for name, command in commands.items()}
        self.results: dict[str, Result] = {}

    def result(self, name: str) -> Result:
        if name not in self.results:
            process = self.processes[name]
            out, err = process.communicate(timeout=120)
            self.results[name] = Result(process.returncode, out, err)
        return self.results[name]

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()


@pytest.fixture(scope="module", autouse=True)
def processes() -> Iterator[Background]:
    background = Background()
    yield background
    background.stop()


# === 1. labels and values against torch =========================================================


GOOD_MODELS: dict[str, tuple[Factory, tuple[Shape, ...]]] = {
    "mlp": (pymodels.make_mlp, (pymodels.MLP_INPUT,)),
    "cnn": (pymodels.make_cnn, (pymodels.CNN_INPUT,)),
    "two_inputs": (pymodels.make_two_inputs, pymodels.TWO_INPUTS),
    "tuple_out": (pymodels.make_tuple_out, ((4, 3),)),
}


@functools.cache
def explained(name: str, loss: str = "sum") -> Explanation:
    """explain() on the model built as the CLI builds it, with the CLI's inputs (once per
    model and loss: an Explanation is immutable)."""
    make, shapes = GOOD_MODELS[name]
    return explain(torch_model(make), *torch_inputs(*shapes), loss=loss)


@pytest.fixture(scope="module")
def mlp() -> Explanation:
    return explained("mlp")


@pytest.fixture(scope="module")
def cnn() -> Explanation:
    return explained("cnn")


@pytest.mark.parametrize("loss", ["sum", "mean"])
@pytest.mark.parametrize("name", sorted(GOOD_MODELS))
def test_every_check_verified(name: str, loss: str) -> None:
    result = explained(name, loss)
    assert result.walk.checks(), "a walk with no checks proves nothing"
    assert result.failures() == []


@pytest.mark.parametrize("mode", ["legacy", "full"])
@pytest.mark.parametrize("name", sorted(GOOD_MODELS))
def test_module_hook_arguments_are_what_torch_hands_its_hooks(name: str, mode: str) -> None:
    """Every module backward hook gradexplain recorded (every module, both passes, pre hooks
    too) holds what the same hook, registered in plain torch, receives: the same calls, the same
    number of arguments, the same values, None where torch passes None."""
    make, shapes = GOOD_MODELS[name]
    walk = explained(name).walk
    expected = torch_hook_calls(make, torch_inputs(*shapes), mode)
    kinds = ("backward",) if mode == "legacy" else ("full_backward_pre", "full_backward")
    got: dict[tuple[str, str], list[LabelledEvent]] = defaultdict(list)
    for kind in kinds:
        for item in events(walk, mode, kind):
            got[(kind, item.target)].append(item)
    assert sorted(got) == sorted(expected)
    for key, calls in expected.items():
        assert len(got[key]) == len(calls), key
        for item, call in zip(got[key], calls, strict=True):
            what = f"[{mode}] {key[0]} {key[1] or '<model>'}"
            if key[0] != "full_backward_pre":
                assert_args_equal(args_of(item, "grad_input"), call.grad_input, what)
            assert_args_equal(args_of(item, "grad_output"), call.grad_output, what)


def test_legacy_hook_of_a_linear_head_is_the_operands_of_addmm(mlp: Explanation) -> None:
    """register_backward_hook on `head` (a Linear) sits on AddmmBackward0, so its grad_input is
    addmm's operands (bias, input, weightᵀ), not the gradient of head's input alone. Each label
    is checked against torch's own `.grad`s and retained gradients of a plain run."""
    head = event(mlp.walk, "legacy", "backward", "head")
    assert head.node == "AddmmBackward0"
    grad_input, grad_output = args_of(head, "grad_input"), args_of(head, "grad_output")
    assert labels(grad_input) == ["∂loss/∂head.bias", "∂loss/∂encoder.3:tanh",
                                  "(∂loss/∂head.weight)ᵀ"]
    assert [arg.meaning.layout for arg in grad_input if arg.meaning] == [
        "as-is", "as-is", "transposed"]
    assert labels(grad_output) == ["∂loss/∂output"]

    plain = plain_run(pymodels.make_mlp, torch_inputs(pymodels.MLP_INPUT))
    params = dict(plain.model.named_parameters())
    assert params["head.bias"].grad is not None and params["head.weight"].grad is not None
    assert_close(recorded(grad_input[0].value), params["head.bias"].grad, "∂loss/∂head.bias")
    assert_close(recorded(grad_input[1].value), plain.output_grad("encoder.3"),
                 "∂loss/∂encoder.3:tanh")
    assert_close(recorded(grad_input[2].value), params["head.weight"].grad.T,
                 "(∂loss/∂head.weight)ᵀ")
    assert_close(recorded(grad_output[0].value), plain.output_grad(""), "∂loss/∂output")

    torch_call = torch_hook_calls(pymodels.make_mlp, torch_inputs(pymodels.MLP_INPUT),
                                  "legacy")[("backward", "head")]
    assert_args_equal(grad_input, torch_call[0].grad_input, "legacy head")


def test_full_hook_of_a_linear_head_is_the_gradient_of_its_input(mlp: Explanation) -> None:
    head = event(mlp.walk, "full", "full_backward", "head")
    grad_input = args_of(head, "grad_input")
    assert labels(grad_input) == ["∂loss/∂encoder.3:tanh"]  # head's input, and nothing else
    plain = plain_run(pymodels.make_mlp, torch_inputs(pymodels.MLP_INPUT))
    assert_close(recorded(grad_input[0].value), plain.output_grad("encoder"), "∂loss/∂(input)")
    torch_call = torch_hook_calls(pymodels.make_mlp, torch_inputs(pymodels.MLP_INPUT),
                                  "full")[("full_backward", "head")]
    assert_args_equal(grad_input, torch_call[0].grad_input, "full head")


def test_cnn_labels_are_what_torch_says(cnn: Explanation) -> None:
    """The conv's legacy hook sits on ConvolutionBackward0: (input, weight, bias) in that order,
    none transposed; the fc's legacy hook sees Flatten's output; full hooks see each module's
    input. Values from a plain run's `.grad`s and retained gradients."""
    plain = plain_run(pymodels.make_cnn, torch_inputs(pymodels.CNN_INPUT))
    grads = plain.grads(["images"])

    conv = event(cnn.walk, "legacy", "backward", "conv")
    assert conv.node == "ConvolutionBackward0"
    conv_in = args_of(conv, "grad_input")
    assert labels(conv_in) == ["∂loss/∂images", "∂loss/∂conv.weight", "∂loss/∂conv.bias"]
    for arg, name in zip(conv_in, ("images", "conv.weight", "conv.bias"), strict=True):
        assert_close(recorded(arg.value), grads[name], f"legacy conv {arg.name}")
    assert labels(args_of(conv, "grad_output")) == ["∂loss/∂conv:convolution"]

    fc = args_of(event(cnn.walk, "legacy", "backward", "fc"), "grad_input")
    assert labels(fc) == ["∂loss/∂fc.bias", "∂loss/∂flat:view", "(∂loss/∂fc.weight)ᵀ"]
    assert_close(recorded(fc[1].value), plain.output_grad("flat"), "∂loss/∂flat:view")

    expected_full = {"conv": ("∂loss/∂images", None), "act": ("∂loss/∂conv:convolution", "conv"),
                     "pool": ("∂loss/∂act:relu", "act"),
                     "flat": ("∂loss/∂pool:maxpool2dwithindices", "pool"),
                     "fc": ("∂loss/∂flat:view", "flat")}
    for module, (label, before) in expected_full.items():
        grad_input = args_of(event(cnn.walk, "full", "full_backward", module), "grad_input")
        assert labels(grad_input) == [label], module
        want = grads["images"] if before is None else plain.output_grad(before)
        assert_close(recorded(grad_input[0].value), want, f"full {module} grad_input[0]")


def test_two_inputs_model_labels() -> None:
    """The model's own legacy hook sits on its last op (the product): the gradients of the two
    factors; its full hook gives ∂loss/∂x and ∂loss/∂y, its forward's arguments."""
    walk = explained("two_inputs").walk
    plain = plain_run(pymodels.make_two_inputs, torch_inputs(*pymodels.TWO_INPUTS))
    legacy = args_of(event(walk, "legacy", "backward", ""), "grad_input")
    assert labels(legacy) == ["∂loss/∂left:addmm", "∂loss/∂right:addmm"]
    assert_close(recorded(legacy[0].value), plain.output_grad("left"), "∂loss/∂left:addmm")
    full = args_of(event(walk, "full", "full_backward", ""), "grad_input")
    assert labels(full) == ["∂loss/∂x", "∂loss/∂y"]
    for arg, tensor in zip(full, plain.inputs, strict=True):
        assert tensor.grad is not None
        assert_close(recorded(arg.value), tensor.grad, f"full <model> {arg.name}")


@pytest.mark.parametrize("loss", ["sum", "mean"])
@pytest.mark.parametrize("name", sorted(GOOD_MODELS))
def test_final_grads_equal_plain_backward(name: str, loss: str) -> None:
    make, shapes = GOOD_MODELS[name]
    walk = explained(name, loss).walk
    expected = plain_run(make, torch_inputs(*shapes), loss).grads(input_names(walk))
    for walk_pass in walk.passes:
        assert [grad.name for grad in walk_pass.grads] == list(expected)
        for grad in walk_pass.grads:
            assert grad.check is not None and grad.check.verified
            assert_close(recorded(grad.value), expected[grad.name],
                         f"[{walk_pass.mode}] {grad.name}.grad")


def test_mean_loss_seeds_backward_with_one_over_the_output_size() -> None:
    """`--loss mean` backpropagates output.mean(): ∂loss/∂output is 1/8 everywhere for (4, 2)."""
    walk = explained("mlp", "mean").walk
    grad_output = args_of(event(walk, "legacy", "backward", "head"), "grad_output")
    assert labels(grad_output) == ["∂loss/∂output"]
    assert_close(recorded(grad_output[0].value), torch.full((4, 2), 1 / 8), "∂loss/∂output")


# === 2. names and reproducibility ===============================================================


def tensor_names(result: Explanation, mode: str) -> set[str]:
    trace = result.session.trace(mode)
    assert trace is not None
    return {name for record in trace.tensors for name in record.names}


def test_tensors_are_named_by_module_path_and_op(mlp: Explanation, cnn: Explanation) -> None:
    """Module outputs are `path:op`, inputs the forward's parameter names, parameters their
    `named_parameters()` names, and `output` and `loss` the model's result and the scalar."""
    for mode in ("legacy", "full"):
        assert tensor_names(mlp, mode) >= {
            "x", "encoder.0:addmm", "encoder.1:relu", "encoder.2:addmm", "encoder.3:tanh",
            "encoder:tanh", "head:addmm", "output", "loss", "encoder.0.weight", "head.bias"}
        assert tensor_names(cnn, mode) >= {
            "images", "conv:convolution", "act:relu", "pool:maxpool2dwithindices",
            "flat:view", "fc:addmm", "output", "loss", "conv.weight", "fc.bias"}


def test_both_passes_name_the_same_tensors(mlp: Explanation, cnn: Explanation) -> None:
    """Full hooks wrap module outputs in new tensors; the names must not depend on that."""
    for result in (mlp, cnn):
        assert tensor_names(result, "legacy") == tensor_names(result, "full")


def test_inputs_are_named_by_the_forwards_parameters() -> None:
    assert input_names(explained("two_inputs").walk) == ["x", "y"]
    assert input_names(explained("cnn").walk) == ["images"]
    # nn.Sequential's forward calls its argument `input`
    deep = explain(torch_model(pymodels.make_deep), pymodels.DEEP_INPUT)
    assert input_names(deep.walk) == ["input"]


def test_labels_show_whole_names(mlp: Explanation) -> None:
    """`∂loss/∂head.weight`, never `∂loss/∂weight`: a Python model has many `weight`s."""
    texts = {arg.meaning.text for walk_pass in mlp.walk.passes for item in walk_pass.events
             for arg in item.args if arg.meaning is not None}
    assert "∂loss/∂head.weight" in texts and "∂loss/∂encoder.0.weight" in texts
    assert not {"∂loss/∂weight", "∂loss/∂bias"} & texts


def test_json_is_byte_identical_across_processes(processes: Background) -> None:
    """Two processes (each with its own hash seed, so also its own name for the imported user
    module) print the same bytes."""
    first, second = processes.result("script"), processes.result("module")
    assert first.code == 0, first.stderr
    assert first.stdout == second.stdout
    assert json.loads(first.stdout)["spec"] == "tests.helpers.pymodels:make_mlp"


def test_command_line_and_explain_agree(cli: CLI, processes: Background) -> None:
    """Same model, same inputs: the CLI (in this process and as a separate one) and explain()
    give the same JSON. Only `spec` differs: the CLI has the target as typed, explain() the
    model's name (the factory's, the class's, or `name=`) followed by ` (Python)`."""
    here = walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3")
    assert here["spec"] == f"{PYMODELS}:make_mlp"
    assert processes.result("module").code == 0, processes.result("module").stderr
    elsewhere = json.loads(processes.result("module").stdout)
    assert elsewhere["spec"] == "tests.helpers.pymodels:make_mlp"
    assert without_spec(elsewhere) == without_spec(here)

    from_instance = explain(pymodels.MLP_INSTANCE, pymodels.MLP_INPUT).json()
    assert from_instance["spec"] == "MLP (Python)"
    assert without_spec(from_instance) == without_spec(here)
    with seeded():  # the CLI calls the factory under manual_seed(0); explain() does not
        from_factory = explain(pymodels.make_mlp, pymodels.MLP_INPUT).json()
    assert from_factory["spec"] == "make_mlp (Python)"
    assert without_spec(from_factory) == without_spec(here)
    named = explain(pymodels.MLP_INSTANCE, pymodels.MLP_INPUT, name="clf").json()
    assert named["spec"] == "clf (Python)"


def test_explanation_renders_like_the_command_line(cli: CLI, mlp: Explanation) -> None:
    markdown = cli("walk", f"{PYMODELS}:make_mlp", "--input", "4x3", "-f", "markdown")
    assert markdown.code == 0, markdown.stderr
    # The title and the `about` line name the model (the target as typed, or "MLP (Python)");
    # everything after them is the same.
    api_lines, cli_lines = mlp.markdown().splitlines(), markdown.stdout.splitlines()
    assert cli_lines[2] == (f"MLP from {PYMODELS}:make_mlp: loss = sum(output), "
                            "backpropagated with loss.backward()")
    assert api_lines[2] == "MLP from MLP (Python): loss = sum(output), backpropagated with " \
                           "loss.backward()"
    assert api_lines[3:] == cli_lines[3:]
    assert_markdown_well_formed(mlp.report())
    assert "∂loss/∂head.bias" in plain_text(mlp.text())


def test_explain_is_the_packages_own(processes: Background) -> None:
    """`from gradexplain import explain` is the API function. (It was once shadowed by a
    submodule `gradexplain/explain.py`, since renamed torch_errors.py.)"""
    exported: object = gradexplain.explain
    assert exported is api.explain and gradexplain.Explanation is api.Explanation
    fresh = processes.result("import")
    assert fresh.code == 0, fresh.stderr
    assert fresh.stdout == "gradexplain.api explain gradexplain.api\n"


# === 3. the user's model is left as it was ======================================================


def test_explain_leaves_the_model_and_inputs_untouched() -> None:
    model = torch_model(pymodels.make_mlp)
    x = torch_inputs(pymodels.MLP_INPUT)[0]
    state = {name: value.clone() for name, value in model.state_dict().items()}
    x_before = x.clone()
    rng = torch.get_rng_state()

    result = explain(model, x)

    assert result.failures() == []
    for path, module in model.named_modules():
        for hooks in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                      "_backward_pre_hooks"):
            assert not getattr(module, hooks), f"{path or '<model>'}.{hooks} left behind"
        assert module.training
    for name, param in model.named_parameters():
        assert param.grad is None, f"{name}.grad set"
        assert param.requires_grad
        assert not param._backward_hooks, f"tensor hook left on {name}"
        assert torch.equal(param, state[name]), f"{name} changed"
    assert not x.requires_grad and x.grad is None and torch.equal(x, x_before)
    assert torch.equal(rng, torch.get_rng_state()), "explain() moved the caller's RNG"
    # ... and running it again gives the same walk: nothing stuck to the model in between.
    assert explain(model, x).json() == result.json()


# === 4. command-line forms ======================================================================


def test_factory_instance_and_module_forms_agree(cli: CLI) -> None:
    """`file.py:factory`, `file.py:instance` and `pkg.module:factory` load the same model."""
    factory = walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3")
    instance = walk_json(cli, f"{PYMODELS}:MLP_INSTANCE", "--input", "4x3")
    module = walk_json(cli, "tests.helpers.pymodels:make_mlp", "--input", "4x3")
    assert instance["spec"] == f"{PYMODELS}:MLP_INSTANCE"
    assert module["spec"] == "tests.helpers.pymodels:make_mlp"
    assert without_spec(instance) == without_spec(factory) == without_spec(module)


def test_console_script_finds_a_package_in_the_working_directory(
        processes: Background) -> None:
    """The console script does not have the working directory on sys.path, yet
    `tests.helpers.pymodels:make_mlp` run from the repository root must import."""
    result = processes.result("script")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["passes"]


def test_input_shapes_are_seeded_randn_in_order(cli: CLI) -> None:
    """`--input 4x3 --input 4x5`: manual_seed(0), then randn(4, 3), then randn(4, 5)."""
    doc = walk_json(cli, f"{PYMODELS}:make_two_inputs", "--input", "4x3", "--input", "4x5")
    plain = plain_run(pymodels.make_two_inputs, torch_inputs(*pymodels.TWO_INPUTS))
    for name, grad in plain.grads(["x", "y"]).items():
        for walk_pass in doc["passes"]:
            got = torch.tensor(walk_pass["grads"][name], dtype=torch.float64)
            assert_close(got, grad, f"[{walk_pass['mode']}] {name}.grad")


def test_inputs_file_with_one_tensor_is_the_same_as_input(cli: CLI, tmp_path: Path) -> None:
    """A saved tensor equal to what `--input 4x3` draws gives the very same walk."""
    path = tmp_path / "x.pt"
    torch.save(torch_inputs(pymodels.MLP_INPUT)[0], path)
    from_file = walk_json(cli, f"{PYMODELS}:make_mlp", "--inputs", str(path))
    assert from_file == walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3")


def test_inputs_file_with_a_list_feeds_each_argument(cli: CLI, tmp_path: Path) -> None:
    with seeded(7):
        x, y = torch.randn(2, 3), torch.randn(2, 5)
    path = tmp_path / "xy.pt"
    torch.save([x, y], path)
    doc = walk_json(cli, f"{PYMODELS}:make_two_inputs", "--inputs", str(path))
    forward = json_event(doc, "forward_pre", "")
    assert [arg["value"] for arg in forward["args"]] == [x.tolist(), y.tolist()]
    plain = plain_run(pymodels.make_two_inputs, [x, y])
    for name, grad in plain.grads(["x", "y"]).items():
        got = torch.tensor(doc["passes"][1]["grads"][name], dtype=torch.float64)
        assert_close(got, grad, f"{name}.grad")


def test_loss_mean_on_the_command_line(cli: CLI) -> None:
    doc = walk_json(cli, f"{PYMODELS}:make_cnn", "--input", "2x1x6x6", "--loss", "mean")
    plain = plain_run(pymodels.make_cnn, torch_inputs(pymodels.CNN_INPUT), "mean")
    for name, grad in plain.grads(["images"]).items():
        got = torch.tensor(doc["passes"][0]["grads"][name], dtype=torch.float64)
        assert_close(got, grad, f"{name}.grad")
    summed = walk_json(cli, f"{PYMODELS}:make_cnn", "--input", "2x1x6x6")
    assert summed["passes"][0]["grads"] != doc["passes"][0]["grads"]


def test_diff_of_a_python_model(cli: CLI) -> None:
    result = cli("diff", f"{PYMODELS}:make_mlp", "--input", "4x3", "-f", "json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "gradexplain.diff/1"
    paths = {path for path, _ in torch_model(pymodels.make_mlp).named_modules()}
    assert {item["module"] for item in doc["modules"]} == paths
    text = cli("diff", f"{PYMODELS}:make_mlp", "--input", "4x3")
    assert text.code == 0, text.stderr
    assert "∂loss/∂head.bias" in text.stdout and "Traceback" not in text.stderr


def test_report_of_a_python_model(cli: CLI) -> None:
    result = cli("report", f"{PYMODELS}:make_cnn", "--input", "2x1x6x6")
    assert result.code == 0, result.stderr
    assert_markdown_well_formed(result.stdout)
    # The model section shows the command and print(model)
    assert f"gradexplain walk {PYMODELS}:make_cnn --input 2x1x6x6 --loss sum" in result.stdout
    assert repr(torch_model(pymodels.make_cnn)) in result.stdout


def test_save_then_load_renders_the_same(cli: CLI, tmp_path: Path) -> None:
    saved = tmp_path / "session.json"
    live = cli("walk", f"{PYMODELS}:make_mlp", "--input", "4x3", "--save", str(saved))
    assert live.code == 0, live.stderr
    assert cli("walk", "--load", str(saved)).stdout == live.stdout
    live_report = cli("report", f"{PYMODELS}:make_mlp", "--input", "4x3")
    assert cli("report", "--load", str(saved)).stdout == live_report.stdout


def test_explanation_save_loads_on_the_command_line(mlp: Explanation, cli: CLI,
                                                    tmp_path: Path) -> None:
    saved = tmp_path / "session.json"
    mlp.save(saved)
    loaded = cli("walk", "--load", str(saved), "-f", "json")
    assert loaded.code == 0, loaded.stderr
    assert json.loads(loaded.stdout) == mlp.json()


# === 5. bad input: exit 2, one line `error: ...`, no traceback ==================================


@dataclass(frozen=True)
class Bad:
    id: str
    args: tuple[str, ...]  # `{tmp}` stands for the test's temporary folder
    says: tuple[str, ...]


# What Python and torch themselves say for the two failures gradexplain passes on, asked of them
# here (their wording is theirs to change): the factory called without its argument, and the MLP
# (3 input features) run on 5 features.
NO_ARGUMENT_SAYS = raised_by(lambda: pymodels.make_sized())  # type: ignore[call-arg]
MLP_ON_5_FEATURES_SAYS = raised_by(lambda: torch_model(pymodels.make_mlp)(torch.randn(4, 5)))

BAD = [
    Bad("bare_file", ("walk", PYMODELS), ("is Python: name the model in it",
                                          f"{PYMODELS}:make_model")),
    Bad("missing_file", ("walk", "nowhere/models.py:make", "--input", "4x3"),
        ("nowhere/models.py: no such file",)),
    Bad("missing_attribute", ("walk", "{tmp}/few.py:make_modle", "--input", "4x3"),
        ("has no attribute 'make_modle'", "(it has: make_model, model)")),
    Bad("missing_module", ("walk", "tests.nowhere:make", "--input", "4x3"),
        ("tests.nowhere: cannot import it",)),
    Bad("factory_needs_arguments", ("walk", f"{PYMODELS}:make_sized", "--input", "4x3"),
        ("calling it with no arguments failed", NO_ARGUMENT_SAYS)),
    Bad("not_a_module", ("walk", f"{PYMODELS}:NOT_A_MODEL", "--input", "4x3"),
        ("NOT_A_MODEL", "not an nn.Module")),
    Bad("factory_returns_no_module", ("walk", f"{PYMODELS}:make_not_a_module", "--input", "4x3"),
        ("returned a dict, not an nn.Module",)),
    Bad("input_not_a_shape", ("walk", f"{PYMODELS}:make_mlp", "--input", "4xa"),
        ("--input '4xa'", "expected a shape such as 4x3")),
    Bad("input_zero_size", ("walk", f"{PYMODELS}:make_mlp", "--input", "0x3"),
        ("--input '0x3'", "positive sizes")),
    Bad("input_bad_dtype", ("walk", f"{PYMODELS}:make_mlp", "--input", "4x3:int8"),
        ("dtype 'int8' is not one of float32, float64, int64",)),
    Bad("too_few_inputs", ("walk", f"{PYMODELS}:make_two_inputs", "--input", "4x3"),
        ("its forward takes 2 input(s) (x, y), 1 given",)),
    Bad("no_inputs", ("walk", f"{PYMODELS}:make_mlp"), ("takes 1 input(s) (x), 0 given",)),
    Bad("forward_shape_mismatch", ("walk", f"{PYMODELS}:make_mlp", "--input", "4x5"),
        ("its forward raised RuntimeError on inputs of shape (4, 5): " + MLP_ON_5_FEATURES_SAYS,)),
    Bad("forward_raises_its_own_error", ("walk", f"{PYMODELS}:make_raises", "--input", "4x5"),
        ("its forward raised ValueError on inputs of shape (4, 5): expected 3 features, got 5",)),
    Bad("returns_dict", ("walk", f"{PYMODELS}:make_returns_dict", "--input", "4x3"),
        ("the model returned a dict", "a tensor or a tuple of tensors")),
    Bad("input_with_yaml_spec", ("walk", "specs/two_modules.yaml", "--input", "4x3"),
        ("--input: only for a Python model",)),
    Bad("input_and_inputs", ("walk", f"{PYMODELS}:make_mlp", "--input", "4x3", "--inputs",
                             "{tmp}/x.pt"), ("give --input shapes or --inputs FILE, not both",)),
    Bad("inputs_not_a_tensor_file", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "README.md"),
        ("--inputs README.md: not a tensor file torch can load safely",)),
    Bad("inputs_a_dict", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/dict.pt"),
        ("expected a tensor or a list of tensors, found dict",)),
    Bad("inputs_missing", ("walk", f"{PYMODELS}:make_mlp", "--inputs", "{tmp}/none.pt"),
        ("none.pt: no such file",)),
    Bad("load_with_input", ("walk", "--load", "{tmp}/x.pt", "--input", "4x3"),
        ("--load renders a saved session as it was captured: leave out --input",)),
    # only the exception's first line: the second ("and a second line") stays out
    Bad("import_raises", ("report", "{tmp}/broken.py:make", "--input", "4x3"),
        ("broken.py: running it raised ImportError: needs the flux capacitor",)),
]


@pytest.fixture
def bad_files(tmp_path: Path) -> Path:
    (tmp_path / "few.py").write_text(
        "from torch import nn\n\n\ndef make_model():\n    return nn.Linear(3, 2)\n\n\n"
        "model = make_model()\n_private = 1\n", encoding="utf-8")
    (tmp_path / "broken.py").write_text(
        "raise ImportError('needs the flux capacitor\\nand a second line')\n", encoding="utf-8")
    torch.save(torch.zeros(4, 3), tmp_path / "x.pt")
    torch.save({"x": torch.zeros(4, 3)}, tmp_path / "dict.pt")
    return tmp_path


def assert_one_error_line(result: Result, says: Sequence[str]) -> None:
    assert result.code == 2, (result.code, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in says:
        assert fragment in lines[0]


@pytest.mark.parametrize("case", BAD, ids=[case.id for case in BAD])
def test_bad_input_is_one_error_line(case: Bad, cli: CLI, bad_files: Path) -> None:
    result = cli(*(arg.replace("{tmp}", str(bad_files)) for arg in case.args))
    assert_one_error_line(result, case.says)


def test_bad_input_as_a_separate_process(processes: Background) -> None:
    """The same rule through a real process (nothing else on stderr, no traceback)."""
    assert_one_error_line(processes.result("forward_raises"),
                          ["its forward raised RuntimeError on inputs of shape (4, 5)"])


def test_explain_rejects_bad_arguments() -> None:
    from gradexplain.errors import GradexplainError

    with pytest.raises(GradexplainError, match="input 0 is a str"):
        explain(pymodels.MLP_INSTANCE, "4x3")  # type: ignore[arg-type]
    with pytest.raises(GradexplainError, match="loss 'max'"):
        explain(pymodels.MLP_INSTANCE, pymodels.MLP_INPUT, loss="max")
    with pytest.raises(GradexplainError, match=r"takes 2 input\(s\) \(x, y\), 1 given"):
        explain(pymodels.make_two_inputs, (4, 3))
    with pytest.raises(GradexplainError, match="calling it with no arguments failed"):
        explain(pymodels.make_sized, (4, 3))


# === 6. a deeper model, and values recorded as summaries ========================================


def test_thirty_blocks_walk_with_every_check_verified_and_summaries(cli: CLI) -> None:
    """30 residual blocks (91 modules): every check holds, and with `--max-values 4` each value
    of more than 4 elements is recorded as a summary (min, max, mean, norm), the rest in full."""
    doc = walk_json(cli, f"{PYMODELS}:make_deep", "--input", "3x4", "--max-values", "4")
    legacy_hooks = {item["target"] for item in doc["passes"][0]["events"]
                    if item["hook"] == "backward"}
    assert len(legacy_hooks) == 1 + pymodels.DEEP_BLOCKS * 3
    summaries = full = 0
    for walk_pass in doc["passes"]:
        for item in walk_pass["events"]:
            for arg in item["args"]:
                if arg.get("check") is not None:
                    assert arg["check"]["verified"], (item["seq"], arg)
                if "summary" not in arg and "value" not in arg:
                    continue  # a None argument
                if math.prod(arg["shape"]) > 4:
                    assert set(arg["summary"]) == {"min", "max", "mean", "norm"}
                    assert arg.get("value") is None
                    summaries += 1
                else:
                    assert arg.get("summary") is None and arg["value"] is not None
                    full += 1
    assert summaries > 1000 and full > 100


def test_explain_max_values_summarises_in_the_walk_data() -> None:
    model = torch_model(pymodels.make_deep)
    result = explain(model, pymodels.DEEP_INPUT, max_values=4)
    assert result.failures() == []
    values = [arg.value for walk_pass in result.walk.passes for item in walk_pass.events
              for arg in item.args if arg.value is not None]
    for value in values:
        if math.prod(value.shape) > 4:
            assert value.summary is not None and value.value is None
        else:
            assert value.summary is None and value.value is not None
    # a summary is the tensor's own: the input x (3x4) as torch computes it
    x = torch_inputs(pymodels.DEEP_INPUT)[0].double()
    first = next(arg.value for arg in result.walk.passes[0].events[0].args)
    assert first is not None and first.summary is not None
    assert (first.summary.min, first.summary.max) == (float(x.min()), float(x.max()))
    assert first.summary.mean == pytest.approx(float(x.mean()))
    assert first.summary.norm == pytest.approx(float(x.norm()))


def test_python_models_summarise_above_1000_values_by_default(cli: CLI) -> None:
    """400x3 inputs: x (1,200 values) and the (400, 4) activations (1,600) become summaries,
    the head's output (800 values) stays in full."""
    doc = walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "400x3")
    head = json_event(doc, "forward", "head")
    assert [("summary" in arg, arg["shape"]) for arg in head["args"]] == [
        (True, [400, 4]), (False, [400, 2])]
    encoder0 = json_event(doc, "forward", "encoder.0")
    assert [("summary" in arg, arg["shape"]) for arg in encoder0["args"]] == [
        (True, [400, 3]), (True, [400, 4])]


# === fixed bugs: each test reproduces one found while writing these tests ======================


def test_explain_walk_name_has_no_leading_colon(mlp: Explanation) -> None:
    assert not mlp.walk.name.startswith(":"), mlp.walk.name
    assert mlp.report().startswith("# gradexplain report: MLP")


def test_forward_raising_assertion_is_bad_input(cli: CLI) -> None:
    result = cli("walk", f"{PYMODELS}:make_asserts", "--input", "4x5")
    assert_one_error_line(result, ["its forward raised AssertionError"])


def test_dropout_in_training_mode_walks_cleanly() -> None:
    result = explain(torch_model(pymodels.make_dropout), (4, 3))
    assert result.failures() == []


def test_unnamed_tensor_under_a_transpose() -> None:
    result = explain(torch_model(pymodels.make_transposed_product), (3, 4))
    assert result.failures() == []


def test_factory_is_seeded_even_after_random_imports(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "noisy.py").write_text(
        "import torch\nfrom tests.helpers.pymodels import make_mlp\n\nNOISE = torch.randn(3)\n",
        encoding="utf-8")
    noisy = walk_json(cli, f"{tmp_path}/noisy.py:make_mlp", "--input", "4x3")
    assert without_spec(noisy) == without_spec(
        walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3"))


def test_explain_factory_matches_the_command_line(cli: CLI) -> None:
    here = walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3")
    with seeded(1234):
        rng = torch.get_rng_state()
        result = explain(pymodels.make_mlp, pymodels.MLP_INPUT).json()
        assert torch.equal(rng, torch.get_rng_state()), "explain() moved the caller's RNG"
    assert without_spec(result) == without_spec(here)
