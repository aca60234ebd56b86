"""`gradexplain diff` on where a legacy hook sits and why it does not fire, for results that are
not one tensor: torch puts the hook on the grad_fn of item [0] of the result until a tensor (a
dict's first tensor value), so on a nested tuple's first part, and it fires for a dict or a
list (the full hook does not). And its advice where legacy gave a parameter's share only. Each
against plain torch's own hooks on the same module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gradexplain.analysis.diff import compare
from gradexplain.api import explain
from gradexplain.records.diff import ModuleDiff
from tests.analysis.test_diff import close, hooked, module_of, only_call, row


class Inner(nn.Module):
    def __init__(self, result: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.result = result

    def forward(self, x: torch.Tensor) -> Any:
        return self.result(x)


class Outer(nn.Module):
    """`n` returns `shape(x)`; the caller uses every tensor of it (`use`)."""

    def __init__(self, result: Callable[[torch.Tensor], Any],
                 use: Callable[[Any], torch.Tensor]) -> None:
        super().__init__()
        self.n = Inner(result)
        self.use = use

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.use(self.n(x))


def nested(x: torch.Tensor) -> Any:
    return (x * 2, x * 3), x.exp()


def use_nested(out: Any) -> torch.Tensor:
    (a, b), c = out
    result: torch.Tensor = a * b + c
    return result


def as_dict(x: torch.Tensor) -> Any:
    return {"a": x * 2, "b": x.sin()}


def use_dict(out: Any) -> torch.Tensor:
    result: torch.Tensor = out["a"] * out["b"]
    return result


def as_list(x: torch.Tensor) -> Any:
    return [x.sin(), x * 3]


def use_list(out: Any) -> torch.Tensor:
    result: torch.Tensor = out[0] + out[1]
    return result


def diff_of_n(result: Callable[[torch.Tensor], Any], use: Callable[[Any], torch.Tensor],
              x: torch.Tensor) -> ModuleDiff:
    return module_of(compare(explain(Outer(result, use), x).session), "n")


def test_legacy_sits_where_torch_puts_it_on_a_tuple_a_dict_and_a_list() -> None:
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    for result, use, first in ((nested, use_nested, lambda out: out[0][0]),
                               (as_dict, use_dict, lambda out: out["a"]),
                               (as_list, use_list, lambda out: out[0])):
        model = Outer(result, use)
        given = x.detach().clone().requires_grad_()
        torch_node = first(model.n(given)).grad_fn.name()
        legacy_calls = hooked(model, ["n"], False, lambda: model(given).sum())  # noqa: B023
        assert len(legacy_calls["n"]) == 1  # torch: legacy fires
        n = diff_of_n(result, use, x)
        assert n.last_node == torch_node
        call = only_call(n)
        assert call.legacy_seq is not None  # not "neither hook fired"
        legacy, _, _ = row(call, "grad_input[0]")
        assert close(legacy, legacy_calls["n"][0][0][0])
        said = " ".join(finding.text for finding in n.findings())
        assert f"legacy sits on {torch_node}" in said
        assert "never fires: it sits on" not in said and "no gradient reached n" not in said


def test_a_module_returning_its_argument_is_said_to_sit_on_the_callers_op() -> None:
    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n = Inner(lambda x: x)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.n(x.exp()) * 3
            return out

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    made = x.detach().clone().requires_grad_().exp()
    assert Top().n(made).grad_fn is made.grad_fn  # torch: n's output is the caller's op's
    n = module_of(compare(explain(Top(), x).session), "n")
    said = " ".join(finding.text for finding in n.findings())
    assert "legacy sits on ExpBackward0" in said
    assert "its argument 0 returned as it got it" in said
    assert "the last op of its forward" not in said


def test_a_first_output_without_grad_is_said_to_be_one() -> None:
    def argmax_first(x: torch.Tensor) -> Any:
        return x.argmax(1), x.sin() * 2

    def use(out: Any) -> torch.Tensor:
        second: torch.Tensor = out[1]
        return second

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    model = Outer(argmax_first, use)
    given = x.detach().clone().requires_grad_()
    assert hooked(model, ["n"], False, lambda: model(given).sum())["n"] == []  # torch: never
    n = diff_of_n(argmax_first, use, x)
    said = " ".join(finding.text for finding in n.findings())
    assert "legacy never fires" in said and "does not require grad" in said
    assert "returns a leaf unchanged" not in said


def test_the_advice_for_a_parameters_share_says_grad_holds_the_whole() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p = nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sin(x * self.p) * self.p

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = Twice()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.m(x)
            return out

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    model = Top()
    legacy = hooked(model, ["m"], False, lambda: model(x).sum())["m"][0][0]
    reference = Top()
    whole, = torch.autograd.grad(reference(x).sum(), reference.m.p)
    share = next(item for item in legacy if item is not None and item.shape == whole.shape)
    assert not torch.allclose(share, whole)  # p.grad is not the share legacy gave
    m = module_of(compare(explain(Top(), x).session), "m")
    assert "read m.p.grad for the whole ∂loss/∂p" in m.verdict
    assert "read m.p.grad or use a post-accumulate-grad hook" not in m.verdict


def test_an_in_place_modules_grad_output_is_its_output_changed_in_place() -> None:
    """nn.ReLU(inplace=True) returns its argument, changed: grad_output[0] is the gradient of
    that output (plain torch's legacy hook), said to be the output, not the argument."""
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.lin, self.act = nn.Linear(3, 3), nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.act(self.lin(x)) * 2
            return out

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    model = Block()
    legacy = hooked(model, ["act"], False, lambda: model(x).sum())["act"][0]
    act = module_of(compare(explain(Block(), x).session), "act")
    call = only_call(act)
    grad_output, _, _ = row(call, "grad_output[0]")
    assert close(grad_output, legacy[1][0])  # torch: 2s, the gradient of act's output
    note = next(item.note for item in call.rows if item.name == "grad_output[0]")
    assert "act's output" in note and "changed in place" in note
    said = " ".join(finding.text for finding in act.findings())
    # relu_ in act's forward made ReluBackward0 (plain torch: the output's grad_fn is
    # ReLU's own node, not the Linear's): not "an op made before act ran".
    assert "legacy sits on ReluBackward0" in said and "the last op of its forward" in said
    assert "returned as it got it" not in said


def test_full_zeros_for_an_input_without_grad_are_not_advised_as_missing() -> None:
    """`a * b`, b without grad: torch gives legacy (∂loss/∂a, None) and full (∂loss/∂a, zeros).
    Both say no gradient flows to b: the verdict no longer tells the reader to use full hooks
    for ∂loss/∂b = 0."""
    class Product(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a * b

    a = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    b = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    model, other = Product(), Product()  # torch takes one kind of hook per module
    legacy = hooked(model, [""], False, lambda: model(a, b).sum())[""][0][0]
    full = hooked(other, [""], True, lambda: other(a, b).sum())[""][0][0]
    assert legacy[1] is None and torch.equal(full[1], torch.zeros(2, 3))
    top = module_of(compare(explain(Product(), a, b).session), "")
    assert "plus None for Mul's operands without gradient" in top.verdict
    assert "= 0" not in top.verdict


def test_a_list_argument_is_said_to_be_no_tensor_and_its_tensors_not_made_inside() -> None:
    """`m([x.sin(), y])`: torch's full hook gives (None,), for full hooks see positional tensor
    arguments only, though the list's tensors require grad. The verdict says that (not "no
    input of m requires grad"), and x.sin(), made by the caller, is not said to be inside m."""
    class Pair(nn.Module):
        def forward(self, items: list[torch.Tensor]) -> torch.Tensor:
            return items[0] * items[1]

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = Pair()

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.m([x.sin(), y])
            return out

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    y = torch.randn(2, 3, generator=torch.Generator().manual_seed(1)).requires_grad_()
    model = Top()
    full = hooked(model, ["m"], True, lambda: model(x, y).sum())["m"][0][0]
    assert full == (None,)  # torch
    m = module_of(compare(explain(Top(), x, y).session), "m")
    assert "none of m's arguments is a tensor" in m.verdict
    assert "no input of m requires grad" not in m.verdict
    notes = " ".join(row_.note for row_ in only_call(m).rows)
    assert "inside m" not in notes and "not one of m's tensor arguments" in notes


def test_a_result_whose_first_tensor_goes_unused_walks_and_says_why_no_hook_fires() -> None:
    """A nested tuple, a dict or a list whose first tensor the caller never uses: the legacy
    hook sits on a node no backward reaches (walk and diff failed on it, KeyError). Every label
    is checked, and for the dict the verdict gives each hook's own reason."""
    def skipped_dict(x: torch.Tensor) -> Any:
        return {"skip": x.sin(), "use": x.cos()}

    def use_dict_value(out: Any) -> torch.Tensor:
        used: torch.Tensor = out["use"]
        return used

    def use_later(out: Any) -> torch.Tensor:
        (_, b), c = out
        result: torch.Tensor = b + c
        return result

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    for result, use in ((nested, use_later), (skipped_dict, use_dict_value)):
        model = Outer(result, use)
        given = x.detach().clone().requires_grad_()
        assert hooked(model, ["n"], False, lambda: model(given).sum())["n"] == []  # noqa: B023
        explanation = explain(Outer(result, use), x)
        assert explanation.failures() == []
        n = module_of(compare(explanation.session), "n")
        if result is skipped_dict:
            assert "legacy never fires" in n.verdict and "full never fires" in n.verdict
            assert "no gradient reaches n" not in n.verdict


def test_x_times_x_gives_two_shares_not_a_reordering() -> None:
    """`x * x`: legacy's grad_input[0] and [1] are x's two shares (plain torch: each is the
    other operand times g), so nothing is reordered."""
    class Square(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * x

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sq = Square()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.sq(x.sin())
            return out

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    model = Top()
    legacy = hooked(model, ["sq"], False, lambda: model(x).sum())["sq"][0][0]
    assert torch.allclose(legacy[0], legacy[1])  # torch: the same share twice
    sq = module_of(compare(explain(Top(), x).session), "sq")
    kinds = {finding.kind for finding in sq.findings()}
    assert "order" not in kinds and "partial" in kinds


def test_legacy_is_not_said_to_lack_the_gradient_of_an_argument_none_reaches() -> None:
    """`c(y)` returns `w * 2`: y reaches nothing (plain torch: no gradient), so legacy lacks
    nothing there, whatever full does."""
    class Const(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))

        def forward(self, y: torch.Tensor) -> torch.Tensor:
            return self.w * 2

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = Const()

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = x.sin() + self.c(y)
            return out

    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    y = torch.randn(2, 3, generator=torch.Generator().manual_seed(1)).requires_grad_()
    reference = Top()
    unused, = torch.autograd.grad(reference(x, y).sum(), y, allow_unused=True)
    assert unused is None  # torch: no gradient reaches y
    c = module_of(compare(explain(Top(), x, y).session), "c")
    said = " ".join(finding.text for finding in c.findings())
    assert "lacks the gradient of c's argument 0" not in said
