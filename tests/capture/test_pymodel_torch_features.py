"""Python models using torch features the hook walk meets rarely: custom autograd Functions,
reentrant checkpoints, complex tensors, modules deepcopy refuses, lazy modules, ScriptModules,
hooks that torch itself refuses, sparse gradients.

Each test runs the real command line in a subprocess on a small model file written here. A model
torch can run either walks, its gradients compared with plain PyTorch run here on the same
source, or is refused in one `error:` line naming the file and saying what and why (exit 2).
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.cli import Result
from tests.helpers.pycli import assert_one_model_error_line as one_error_line
from tests.helpers.pycli import run_separately

FILE = "feature_models.py"

SOURCE = '''
import torch
from torch import nn


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return 2 * x * grad


class Mix(torch.autograd.Function):
    """A tensor, a number, a tensor: backward returns None for the number."""

    @staticmethod
    def forward(ctx, a, k, b):
        ctx.save_for_backward(a, b)
        ctx.k = k
        return a * b * k

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b * ctx.k, None, grad * a * ctx.k


class Once(torch.autograd.Function):
    """A backward that refuses a second call on the same ctx."""

    @staticmethod
    def forward(ctx, x):
        ctx.calls = 0
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        ctx.calls += 1
        if ctx.calls > 1:
            raise RuntimeError("once only")
        return grad * 2


class OnceNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        return torch.tanh(Once.apply(self.l(x)))


class SquareNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        return torch.tanh(Square.apply(self.l(x)))


class MixNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)
        self.m = nn.Linear(3, 3)

    def forward(self, x):
        y = self.l(x)
        return Mix.apply(y, 3.0, self.m(x)) + y


class Checkpointed(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.l = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        self.m = nn.Linear(3, 3)
        self.reentrant = reentrant

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        return self.m(checkpoint(self.l, x, use_reentrant=self.reentrant))


def make_square():
    return SquareNet()


def make_mix():
    return MixNet()


def make_once():
    return OnceNet()


def make_weight_norm_old():
    return nn.Sequential(nn.utils.weight_norm(nn.Linear(3, 3)), nn.ReLU())


def make_pruned():
    import torch.nn.utils.prune as prune
    layer = nn.Linear(3, 3)
    prune.l1_unstructured(layer, "weight", amount=0.5)
    return nn.Sequential(layer, nn.ReLU())


def make_scripted():
    return torch.jit.script(nn.Sequential(nn.Linear(3, 3), nn.Tanh()))


def make_script_inside():
    return nn.Sequential(nn.Linear(3, 3), torch.jit.script(nn.Tanh()))


def make_reentrant():
    return Checkpointed(True)


class ComplexInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        y = self.l(x)
        return (torch.complex(y, 2 * y) ** 2).abs()


class ComplexParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3, dtype=torch.cfloat))

    def forward(self, x):
        return (x.to(torch.cfloat) @ self.w).real


class ComplexOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        y = self.l(x)
        return torch.complex(y, 2 * y)


def make_complex_inside():
    return ComplexInside()


def make_complex_param():
    return ComplexParam()


def make_complex_out():
    return ComplexOut()


def make_sparse_embedding():
    return nn.Sequential(nn.Embedding(10, 3, sparse=True), nn.Tanh())


def make_sparse_bag():
    return nn.EmbeddingBag(10, 3, mode="sum", sparse=True)


class WarningsAsErrors(nn.Module):
    """torch's FutureWarning for a legacy hook on a module of several nodes, made an error by
    the model's own filter."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        import warnings
        warnings.simplefilter("error")
        return torch.tanh(self.l(x)) * 2


def make_warnings_as_errors():
    return WarningsAsErrors()


def make_lazy():
    return nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.BatchNorm1d(4), nn.Linear(4, 2))


def make_linear_plain():
    return nn.Linear(3, 3)


def make_post_accumulate_returns():
    layer = nn.Linear(3, 3)
    layer.weight.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(5))
    return layer


class ModuleInJvp(nn.Module):
    """A module called inside torch.func.jvp: its hooks are handed functorch's wrappers."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        out, tangent = torch.func.jvp(lambda v: torch.sin(self.l(v)), (x,),
                                      (torch.ones_like(x),))
        return out * tangent


class ModuleInVmap(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        return torch.func.vmap(self.l)(x) * 2


class OpsInTransforms(nn.Module):
    """torch.func transforms of plain tensor operations, around no module."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3)

    def forward(self, x):
        h = self.l(x)
        out, tangent = torch.func.jvp(torch.sin, (h,), (torch.ones_like(h),))
        return out * tangent + torch.func.vmap(lambda row: row.tanh() * row)(h)


def make_module_in_jvp():
    return ModuleInJvp()


def make_module_in_vmap():
    return ModuleInVmap()


def make_ops_in_transforms():
    return OpsInTransforms()
'''


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / FILE
    path.write_text(SOURCE, encoding="utf-8")
    return path


def run(*args: str) -> Result:
    return run_separately(*args)


def walk(models: Path, factory: str, *shape: str) -> Result:
    return run("walk", f"{models}:{factory}", "--input", *(shape or ("4x3",)),
               "--format", "json")


def walked(models: Path, factory: str, *shape: str) -> dict[str, Any]:
    """The walk's JSON, which must have exited 0 with every check verified."""
    result = walk(models, factory, *shape)
    assert result.code == 0, result.stderr[-2000:]
    doc: dict[str, Any] = json.loads(result.stdout)
    checks = [arg["check"] for walk_pass in doc["passes"] for item in walk_pass["events"]
              for arg in item["args"] if arg.get("check") is not None]
    assert checks, "a walk with no checks proves nothing"
    assert all(check["verified"] for check in checks)
    return doc


def assert_one_error_line(result: Result, *words: str) -> str:
    # torch's FutureWarning for old weight_norm, shown as Python shows warnings, may come first.
    return one_error_line(result, FILE, *words, warnings_before=True)


def plain_torch(factory: str, shape: tuple[int, ...] = (4, 3),
                dtype: torch.dtype = torch.float32) -> tuple[dict[str, torch.Tensor], Any]:
    """The oracle: SOURCE's factory under torch.manual_seed(0), on torch.manual_seed(0)'s
    randn(shape) (randint(0, 10) for int64), `loss = output.sum(); loss.backward()`; the
    gradients by leaf name, and the model's namespace."""
    namespace: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()), torch.random.fork_rng(devices=[]), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(SOURCE, FILE, "exec"), namespace)
        torch.manual_seed(0)
        model = namespace[factory]()
        torch.manual_seed(0)
        if dtype == torch.int64:
            x = torch.randint(0, 10, shape)
        else:
            x = torch.randn(shape, dtype=dtype).requires_grad_()
        model(x).sum().backward()
    grads = {"x": x.grad}
    grads.update({name: param.grad for name, param in model.named_parameters()})
    return {name: grad for name, grad in grads.items() if grad is not None}, model


def assert_grads_match(doc: dict[str, Any], expected: dict[str, torch.Tensor]) -> None:
    for walk_pass in doc["passes"]:
        got = walk_pass["grads"]
        assert set(got) == set(expected), (walk_pass["mode"], sorted(got))
        for name, grad in expected.items():
            torch.testing.assert_close(torch.tensor(got[name], dtype=grad.dtype),
                                       grad.to_dense())


def tensor_hook_value(doc: dict[str, Any], target: str) -> torch.Tensor:
    """What the tensor hook on `target` received in the legacy pass."""
    found = [item for item in doc["passes"][0]["events"]
             if item["hook"] == "tensor" and item["target"] == target]
    assert len(found) == 1, (target, len(found))
    return torch.tensor(found[0]["args"][0]["value"])


# --- custom autograd Functions ----------------------------------------------------------------

def test_custom_function_walks_with_its_gradient_checked(models: Path) -> None:
    doc = walked(models, "make_square")
    expected, _ = plain_torch("make_square")
    assert_grads_match(doc, expected)
    # The tensor hook on Square's operand: d tanh(y^2)/dy = (1 - tanh(y^2)^2) * 2y.
    _, model = plain_torch("make_square")
    torch.manual_seed(0)
    y = model.l(torch.randn(4, 3)).detach()
    torch.testing.assert_close(tensor_hook_value(doc, "l:addmm"),
                               (1 - torch.tanh(y * y) ** 2) * 2 * y)


def test_custom_function_with_a_number_argument_maps_its_gradients(models: Path) -> None:
    """Mix.backward returns (grad a, None, grad b): the None is the number's, not b's."""
    doc = walked(models, "make_mix")
    expected, _ = plain_torch("make_mix")
    assert_grads_match(doc, expected)
    # The chain rule's step through MixBackward: one checked share per tensor operand.
    terms = [term for line in doc["chain_rule"][0]["lines"] if line["node"] == "MixBackward"
             for term in line["terms"]]
    assert len(terms) == 2, terms
    assert all(term["check"] is not None and term["check"]["verified"] for term in terms)


def test_custom_backward_that_runs_once_walks_without_its_share_checked(models: Path) -> None:
    """The check run calls a custom node's backward a second time; one that refuses leaves its
    share unchecked (never zeros taken for its value), and everything else is checked."""
    doc = walked(models, "make_once")
    expected, _ = plain_torch("make_once")
    assert_grads_match(doc, expected)
    terms = [term for line in doc["chain_rule"][0]["lines"] if line["node"] == "OnceBackward"
             for term in line["terms"]]
    assert terms and all(term.get("check") is None for term in terms), terms


# --- checkpoints --------------------------------------------------------------------------------

def test_reentrant_checkpoint_is_refused_in_one_line(models: Path) -> None:
    assert_one_error_line(walk(models, "make_reentrant"), "use_reentrant")


# --- what torch refuses ---------------------------------------------------------------------

@pytest.mark.parametrize("factory", ["make_weight_norm_old", "make_pruned"])
def test_a_model_torch_will_not_deep_copy_is_one_error_line(models: Path, factory: str) -> None:
    assert_one_error_line(walk(models, factory), "refused to deep-copy")


@pytest.mark.parametrize("factory", ["make_scripted", "make_script_inside"])
def test_a_script_module_is_one_error_line(models: Path, factory: str) -> None:
    assert_one_error_line(walk(models, factory), "TorchScript")


# --- the Python API -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(4, -3), (0, 3), (True, 3), (100_000, 100_000)])
def test_explain_refuses_a_bad_shape_with_the_packages_error(shape: tuple[int, ...]) -> None:
    from gradexplain import GradexplainError, explain

    with pytest.raises(GradexplainError, match=r"input 0 is the shape"):
        explain(torch.nn.Linear(3, 3), shape)


def test_an_input_is_described_in_its_own_dtype() -> None:
    """A bfloat16 input was described as float32 in the session's description (what a report
    and `walk` print above the model), and a bool input asked to require grad was "of dtype
    float32" in the error."""
    from gradexplain import GradexplainError, explain

    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2).to(torch.bfloat16)
    x = torch.randn(4, 3, dtype=torch.bfloat16, requires_grad=True)
    layer(x).sum().backward()
    explanation = explain(layer, x.detach().clone().requires_grad_())
    assert "(4, 3) bfloat16" in explanation.session.spec_text
    assert "float32" not in explanation.session.spec_text.splitlines()[1]
    assert explanation.failures() == []
    got, = (grad for grad in explanation.walk.passes[0].grads if grad.name == "weight")
    assert got.value is not None and got.value.value is not None
    assert layer.weight.grad is not None
    torch.testing.assert_close(torch.tensor(got.value.value, dtype=torch.bfloat16),
                               layer.weight.grad)
    with pytest.raises(GradexplainError, match="dtype bool cannot require grad"):
        explain(torch.nn.Identity(), torch.ones(2, dtype=torch.bool), requires_grad=[True])


# --- complex tensors, sparse gradients, a warning made an error ---------------------------------

@pytest.mark.parametrize("factory", ["make_complex_inside", "make_complex_param",
                                     "make_complex_out"])
def test_complex_tensors_are_refused_in_one_line(models: Path, factory: str) -> None:
    """A label says a real derivative; a complex tensor's gradient is not one. Refused where
    it is met (a hook handed it, or the output), never an internal error."""
    assert_one_error_line(walk(models, factory), "complex")


@pytest.mark.parametrize("factory", ["make_sparse_embedding", "make_sparse_bag"])
def test_sparse_gradients_walk_against_torch(models: Path, factory: str) -> None:
    """Embedding(sparse=True) hands hooks a sparse gradient with no storage to read: recorded
    and checked as the dense tensor it stands for."""
    doc = walked(models, factory, "2x5:int64")
    expected, _ = plain_torch(factory, (2, 5), torch.int64)
    assert any(grad.layout != torch.strided for grad in expected.values())
    for walk_pass in doc["passes"]:
        got = walk_pass["grads"]
        # The token ids are an input too, with no gradient (int64).
        assert {name for name, grad in got.items() if grad is not None} == set(expected)
        for name, grad in expected.items():
            torch.testing.assert_close(torch.tensor(got[name], dtype=grad.dtype),
                                       grad.to_dense())


@pytest.mark.parametrize("factory", ["make_module_in_jvp", "make_module_in_vmap"])
def test_a_module_inside_a_torch_func_transform_is_refused_in_one_line(
        models: Path, factory: str) -> None:
    """Its hooks are handed functorch's wrappers, with no values of their own to read: it was
    an internal error blamed on the model's forward ("Cannot access data pointer"), though
    plain torch runs the model with every kind of hook (done here)."""
    for register in ("register_backward_hook", "register_full_backward_hook"):
        _, model = plain_torch(factory)
        for module in model.modules():
            module.register_forward_pre_hook(lambda *args: None)
            module.register_forward_hook(lambda *args: None)
            getattr(module, register)(lambda *args: None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # legacy hooks' FutureWarning
            model(torch.randn(4, 3, requires_grad=True)).sum().backward()
        assert all(parameter.grad is not None for parameter in model.parameters())
    assert_one_error_line(walk(models, factory), "torch.func transform")


def test_transforms_of_plain_operations_walk_against_torch(models: Path) -> None:
    """What the refusal above advises: the transforms around no module walk, every check
    verified, the gradients plain torch's."""
    doc = walked(models, "make_ops_in_transforms")
    expected, _ = plain_torch("make_ops_in_transforms")
    assert_grads_match(doc, expected)


def test_a_warning_made_an_error_is_said_as_what_it_is(models: Path) -> None:
    """The model's filter turns torch's FutureWarning into an exception inside the module call:
    it is not the module returning something that is no tensor."""
    line = assert_one_error_line(walk(models, "make_warnings_as_errors"), "FutureWarning")
    assert "returned" not in line, line


def test_a_post_accumulate_hook_returning_a_value_is_torchs_refusal(models: Path) -> None:
    """The user's hook returns p.grad (mul_ returns it): torch hands that to the next hook,
    ours, in place of the leaf, then refuses the call. The walk shows the refusal with why,
    exit 1, not an internal error; .grad as torch left it is torch's own, times 5."""
    result = walk(models, "make_post_accumulate_returns")
    assert result.code == 1, result.stderr[-2000:]
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    (run_,) = doc["runs"]
    assert run_["error"] is not None and "post-accumulate" in run_["explanation"]["what"]
    expected, _ = plain_torch("make_linear_plain")
    weight = next(leaf for leaf in run_["leaves"] if leaf["name"] == "weight")
    torch.testing.assert_close(torch.tensor(weight["after"]["value"]), expected["weight"] * 5)


def test_lazy_modules_walk_after_one_seeded_forward(models: Path) -> None:
    """A LazyLinear has no weight to hook until its first call: the walk makes it on a copy
    with one hook-free forward (torch's RNG seeded 0, buffers put back), as the oracle here
    does by hand, then walks with every check verified."""
    doc = walked(models, "make_lazy")
    namespace: dict[str, Any] = {}
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(SOURCE, FILE, "exec"), namespace)
        torch.manual_seed(0)
        model = namespace["make_lazy"]()
        torch.manual_seed(0)
        x = torch.randn(4, 3).requires_grad_()
        norm = model[2]
        with torch.no_grad():
            torch.manual_seed(0)
            model(x)
            norm.reset_running_stats()  # the buffers it had: zeros and ones
        model(x).sum().backward()
    # nn.Sequential.forward names its argument `input`.
    expected = {"input": x.grad,
                **{name: param.grad for name, param in model.named_parameters()}}
    assert_grads_match(doc, {name: grad for name, grad in expected.items() if grad is not None})
