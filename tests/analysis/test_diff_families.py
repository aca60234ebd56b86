"""`diff`'s sentences on model families a sweep found them false for: the same tensor passed
twice, a Flatten of a tensor the caller made inline, the model's own backward hooks (run in one
pass only), a recurrent module whose first output is not its last op, a module returning its
argument untouched.

Torch is the oracle: each test runs plain PyTorch hooks on the same model here and checks the
sentence against what they got.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.api import explain
from gradexplain.records.diff import ModuleDiff

pytestmark = pytest.mark.filterwarnings("ignore:Using a non-full backward hook:FutureWarning")


def module_diff(model: nn.Module, module: str, *inputs: torch.Tensor) -> ModuleDiff:
    found = [item for item in explain(model, *inputs).diff().modules if item.module == module]
    assert len(found) == 1
    return found[0]


def findings(diff: ModuleDiff) -> list[str]:
    return [finding.text for finding in diff.findings()]


def hooked(model: nn.Module, module: nn.Module, kind: str, x: torch.Tensor,
           user: Any = None) -> tuple[list[tuple[torch.Tensor | None, ...]], nn.Module]:
    """Plain torch: grad_input of `module` (found in a deep copy of `model` by identity) under a
    legacy or full backward hook, after `user`'s own hook of the same kind if given."""
    copied = copy.deepcopy(model)
    target = dict(copied.named_modules())[next(
        name for name, item in model.named_modules() if item is module)]
    seen: list[tuple[torch.Tensor | None, ...]] = []
    register = (target.register_backward_hook if kind == "legacy"
                else target.register_full_backward_hook)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if user is not None:
            register(user)
        register(lambda module, grad_input, grad_output: seen.append(tuple(grad_input)))
        copied(x.detach().clone().requires_grad_()).sum().backward()
    return seen, target


class Product(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = Product()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.m(x, x)
        return out


def test_the_same_tensor_passed_twice_is_both_arguments() -> None:
    """`m(x, x)`: legacy grad_input[1] is the share through argument 1, as full's is; it was
    said to lack argument 1's gradient, beside a verdict saying the hooks agree."""
    torch.manual_seed(0)
    model, x = Twice(), torch.randn(2, 3)
    legacy, _ = hooked(model, model.m, "legacy", x)
    full, _ = hooked(model, model.m, "full", x)
    assert len(legacy[0]) == len(full[0]) == 2
    for mine, theirs in zip(legacy[0], full[0], strict=True):
        assert mine is not None and theirs is not None
        torch.testing.assert_close(mine, theirs)
    diff = module_diff(model, "m", x.requires_grad_())
    assert not [text for text in findings(diff) if "lacks" in text]
    assert diff.verdict.startswith("legacy and full agree")


class InlineFlatten(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.flat, self.head = nn.Flatten(), nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.flat(torch.relu(x)))
        return out


def test_a_flatten_of_an_inline_tensor_gives_its_argument() -> None:
    """Legacy sits on the Flatten's ViewBackward0, whose grad_input is the gradient of the
    argument (relu's output); it was "the gradient of flat's own output ..., not of an input"
    and "lacks the gradient of flat's argument 0"."""
    torch.manual_seed(0)
    model, x = InlineFlatten(), torch.randn(1, 2, 3)
    legacy, _ = hooked(model, model.flat, "legacy", x)
    full, _ = hooked(model, model.flat, "full", x)
    copied = copy.deepcopy(model)
    inside = torch.relu(x.detach().clone().requires_grad_())
    (argument_grad,) = torch.autograd.grad(copied.head(copied.flat(inside)).sum(), inside)
    for seen in (legacy[0][0], full[0][0]):
        assert seen is not None
        torch.testing.assert_close(seen, argument_grad)
    said = findings(module_diff(model, "flat", x.requires_grad_()))
    assert not [text for text in said if "not of an input" in text or "lacks" in text], said


class Tanh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.act = nn.Linear(3, 3), nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.act(self.lin(x))
        return out


@pytest.mark.parametrize("kind", ["legacy", "full"])
def test_the_models_own_hook_runs_in_one_pass_and_is_said_to(kind: str) -> None:
    """The model's hook (x10) runs in its own kind's pass only: the rows were `=` and the
    verdict "both give ∂loss/∂lin:addmm, as changed by your hook", though the other pass got
    the unchanged value; the advice to add the other kind of hook cannot be followed."""
    torch.manual_seed(0)
    model, x = Tanh(), torch.randn(2, 3)

    def times_ten(module: nn.Module, grad_input: Any, grad_output: Any) -> tuple[Any, ...]:
        return (grad_input[0] * 10,)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (model.act.register_backward_hook if kind == "legacy"
         else model.act.register_full_backward_hook)(times_ten)
    own, target = hooked(model, model.act, kind, x)
    other = "full" if kind == "legacy" else "legacy"
    bare = copy.deepcopy(model)
    bare.act._backward_hooks.clear()
    bare.act._is_full_backward_hook = None  # as before the model's own hook
    unchanged, _ = hooked(bare, bare.act, other, x)
    assert own[0][0] is not None and unchanged[0][0] is not None
    torch.testing.assert_close(own[0][0], unchanged[0][0] * 10)
    with pytest.raises(RuntimeError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (target.register_full_backward_hook if kind == "legacy"
         else target.register_backward_hook)(lambda *args: None)
        copy.deepcopy(model)(x.detach().clone().requires_grad_()).sum().backward()
    diff = module_diff(model, "act", x.requires_grad_())
    (call,) = diff.calls
    row = next(row for row in call.rows if row.name == "grad_input[0]")
    assert not row.same
    assert [text for text in findings(diff) if f"runs in the {kind} pass only" in text]
    assert "use register_full_backward_hook" not in diff.verdict
    assert "your own backward hook on act" in diff.verdict
    assert "as changed by" not in diff.verdict


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(3, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, h_n = self.rnn(x)
        return out, h_n


def test_a_first_output_made_before_another_is_not_the_last_op() -> None:
    """An RNN makes its output, then h_n: legacy sits on the output's grad_fn, which was said
    to be "the last op of its forward"."""
    torch.manual_seed(0)
    model, x = Recurrent(), torch.randn(2, 3, 3, requires_grad=True)
    out, h_n = copy.deepcopy(model)(x)
    assert out.grad_fn is not None and h_n.grad_fn is not None
    assert out.grad_fn._sequence_nr() < h_n.grad_fn._sequence_nr()  # h_n's op came after
    said = findings(module_diff(model, "rnn", x))
    attach = [text for text in said if text.startswith("legacy sits on")]
    assert attach and all("not the last op of its forward" in text for text in attach)
    assert all(h_n.grad_fn.name() in text for text in attach)
    # One output: its op is the last one, as before.
    single = findings(module_diff(nn.Sequential(nn.Linear(3, 2)), "0", torch.randn(2, 3)))
    assert [text for text in single if "the last op of its forward" in text]


class PassThrough(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.keep, self.out = nn.Linear(3, 3), nn.Identity(), nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.out(self.keep(self.lin(x)))
        return out


def test_an_argument_returned_untouched_is_not_changed_in_place() -> None:
    """Identity returns its argument itself: the row said "(its argument 0, changed in
    place)"."""
    torch.manual_seed(0)
    model, x = PassThrough(), torch.randn(2, 3, requires_grad=True)
    made = copy.deepcopy(model)
    inside = made.lin(x)
    assert made.keep(inside) is inside
    diff = module_diff(model, "keep", x)
    notes = [row.note for call in diff.calls for row in call.rows if row.note]
    assert not [note for note in notes if "changed in place" in note]
    assert [note for note in notes if "full: keep's argument 0" in note]


class DetachedFirst(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.detach() * 2, x * 3


class UsesBoth(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = DetachedFirst()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.inner(x * 1.5)
        out: torch.Tensor = a + b
        return out


def test_an_output_without_grad_is_none_in_every_backward() -> None:
    """Full's grad_output[0] is None because output 0 does not require grad: it "got no
    gradient in this backward", as if another backward could give it one."""
    model, x = UsesBoth(), torch.randn(2, 3, requires_grad=True)
    first, _ = copy.deepcopy(model).inner(x * 1.5)
    assert not first.requires_grad
    said = findings(module_diff(model, "inner", x))
    assert [text for text in said if "output 0 does not require grad" in text]
    assert not [text for text in said if "got no gradient in this backward" in text]


class Recomputed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.act = nn.Linear(3, 3), nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.utils.checkpoint.checkpoint(
            lambda t: self.act(self.lin(t)), x, use_reentrant=False)
        return out


def test_a_call_checkpoint_recomputes_in_the_backward_is_said_to() -> None:
    """checkpoint runs `lin` again during the backward: neither hook fires for that call, which
    was "no gradient reached lin"."""
    torch.manual_seed(0)
    model, x = Recomputed(), torch.randn(2, 3, requires_grad=True)
    copied = copy.deepcopy(model)
    phases: list[str] = []
    fired: list[int] = []
    backward = [False]
    copied.lin.register_forward_hook(
        lambda *args: phases.append("backward" if backward[0] else "forward"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copied.lin.register_backward_hook(lambda *args: fired.append(1))
    out = copied(x)
    backward[0] = True
    out.sum().backward()
    assert phases == ["forward", "backward"] and len(fired) == 1
    said = findings(module_diff(model, "lin", x))
    assert [text for text in said if text.startswith("neither hook fired for call 2 of lin: "
                                                     "it ran during the backward")]
    assert not [text for text in said if "no gradient reached lin" in text]


class SineOfFirst(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return b + a.sin()


class SameTwiceOtherOrder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = SineOfFirst()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.m(x, x)
        return out


def test_one_tensor_as_two_arguments_is_told_apart_by_the_graph() -> None:
    """`m(x, x)` with `b + a.sin()`: legacy sits on the Add, whose grad_input[0] is argument
    1's gradient (b's), and legacy lacks argument 0's (a's, through sin). Argument 0 was
    claimed for grad_input[0] because it comes first by name."""
    torch.manual_seed(0)
    model, x = SameTwiceOtherOrder(), torch.randn(2, 3)
    legacy, _ = hooked(model, model.m, "legacy", x)
    full, _ = hooked(model, model.m, "full", x)
    legacy_first, full_second = legacy[0][0], full[0][1]
    assert legacy_first is not None and full_second is not None and full[0][0] is not None
    torch.testing.assert_close(legacy_first, full_second)  # b's gradient
    assert not torch.allclose(legacy_first, full[0][0])  # not a's (cos x)
    said = findings(module_diff(model, "m", x.requires_grad_()))
    assert "legacy grad_input[0] is argument 1 (x): the order follows the operands of " \
           "AddBackward0, not m's arguments" in said
    assert "legacy grad_input lacks the gradient of m's argument 0 (x)" in said
    assert not [text for text in said if "lacks the gradient of m's argument 1" in text]


def test_the_models_own_legacy_hook_must_go_before_a_full_one() -> None:
    """The verdict advised register_full_backward_hook on a module whose own legacy hook makes
    torch refuse it."""
    torch.manual_seed(0)
    model, x = Tanh(), torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.register_backward_hook(lambda module, grad_input, grad_output: None)
        with pytest.raises(RuntimeError):
            copy.deepcopy(model).register_full_backward_hook(lambda *args: None)
    verdict = module_diff(model, "", x.requires_grad_()).verdict
    assert "use register_full_backward_hook" in verdict
    assert "after removing your own legacy hook <lambda> from <model>" in verdict


def test_a_leaf_returned_as_it_came_is_not_changed_in_place() -> None:
    """nn.Identity on the input itself: "(its argument 0, changed in place)"."""
    x = torch.randn(2, 3, requires_grad=True)
    assert nn.Identity()(x) is x
    diff = module_diff(nn.Identity(), "", x)
    notes = [row.note for call in diff.calls for row in call.rows if row.note]
    assert not [note for note in notes if "changed in place" in note]
