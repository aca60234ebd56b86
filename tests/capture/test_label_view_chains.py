"""Labels through chains of views: batched matmul and multi-head attention.

`matmul` of 3-D and 4-D operands expands each to the batch shape (to its own shape, when no dim
broadcasts) and folds the batch into one dim before `bmm`; an operand whose batch broadcasts is
folded another way, transposed and reshaped. Before, the labeller read a no-op expand as a sum
over broadcast dims and a transpose of a reshape as a reshape: `bmm`'s gradients were claimed
as `∂loss/∂x, summed` or `∂loss/∂x, reshaped` and failed their checks. A layout one word cannot
say now names the tensor by its own op, and an expand to the same size is looked through.

Torch is the oracle: every argument labelled as a leaf's derivative (as it is, reshaped or
transposed) is compared with that leaf's `.grad` from plain torch, put in the stated layout.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gradexplain.api import explain


class MatMul(nn.Module):
    """`x @ w` with a weight of the given shape."""

    def __init__(self, weight: tuple[int, ...]) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(*weight))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x @ self.w
        return out


class Heads(nn.Module):
    """Self-attention written out, two heads: softmax(q kᵀ / √d) v on 4-D tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = (part.reshape(batch, length, 2, 4).transpose(1, 2)
                   for part in self.qkv(x).chunk(3, dim=-1))
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(4), dim=-1)
        out: torch.Tensor = (weights @ v).transpose(1, 2).reshape(batch, length, 8)
        return out



def _cases() -> dict[str, tuple[nn.Module, tuple[int, ...]]]:
    torch.manual_seed(0)
    return {
        "4-D, same batch": (MatMul((2, 2, 3, 4)), (2, 2, 3, 3)),
        "4-D, weight broadcast": (MatMul((1, 2, 3, 4)), (2, 2, 3, 3)),
        "4-D, input broadcast": (MatMul((2, 2, 3, 4)), (2, 1, 3, 3)),
        "5-D": (MatMul((2, 1, 2, 3, 4)), (2, 3, 2, 3, 3)),
        "3-D input of batch 1 against 3-D": (MatMul((2, 3, 4)), (1, 3, 3)),
        "3-D against 2-D": (MatMul((3, 4)), (2, 5, 3)),
        "two heads": (Heads(), (2, 3, 8)),
    }


def _plain(model: nn.Module, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1), requires_grad=True)
    model(x).sum().backward()
    assert x.grad is not None
    grads = {"x": x.grad}
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None
        grads[name] = parameter.grad.clone()
        parameter.grad = None
    return grads


@pytest.mark.parametrize("name", list(_cases()))
def test_every_label_holds_against_plain_torch(name: str) -> None:
    model, shape = _cases()[name]
    grads = _plain(model, shape)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1), requires_grad=True)
    explanation = explain(model, x)
    assert explanation.failures() == []
    compared = 0
    for walk_pass in explanation.walk.passes:
        for event in walk_pass.events:
            for arg in event.args:
                meaning, value = arg.meaning, arg.value
                if (meaning is None or value is None or meaning.wrt not in grads
                        or meaning.modified_by is not None or meaning.via):
                    continue
                assert arg.check is not None and arg.check.verified, (event.seq, arg.name)
                grad = grads[meaning.wrt]
                shape_of_arg = tuple(value.shape)
                if meaning.layout == "as-is":
                    expected = grad
                elif meaning.layout == "reshaped":
                    expected = grad.reshape(shape_of_arg)
                elif meaning.layout == "transposed":
                    expected = grad.mT
                else:
                    continue  # summed: the gradient of an expand's output, not of the leaf
                assert tuple(expected.shape) == shape_of_arg, (event.seq, arg.name)
                if value.value is not None:
                    torch.testing.assert_close(torch.tensor(value.value), expected)
                compared += 1
    assert compared >= 4  # at least each leaf's own hooks, in both passes


@pytest.mark.parametrize("name", ["4-D, same batch", "5-D"])
def test_bmm_operands_are_named_through_a_fold(name: str) -> None:
    """Where the batch broadcasts nothing, bmm's gradient of its first operand is the input's
    own gradient reshaped: said so, not a sum over broadcast dims."""
    model, shape = _cases()[name]
    explanation = explain(model, torch.randn(*shape, requires_grad=True))
    found = [arg.meaning for walk_pass in explanation.walk.passes for event in walk_pass.events
             if event.node == "BmmBackward0" and event.hook == "node" for arg in event.args
             if arg.name == "grad_inputs[0]" and arg.meaning is not None]
    assert found
    assert all(meaning.wrt == "x" and meaning.layout == "reshaped" for meaning in found)


class ExpandViewReused(nn.Module):
    """x through an expand to its own shape and a view into bmm (as `matmul` and the math path
    of scaled_dot_product_attention fold an operand), and used again directly."""

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.bmm(a, x.expand(2, 3, 4).view(2, 3, 4)) + x
        return out


def test_a_share_through_a_no_op_expand_and_a_view_is_said_to_be_a_share() -> None:
    """bmm's gradient of its second operand is only x's share through the expand (x has
    another use): claimed as `∂loss/∂x`, it failed its check. Plain torch gives the share: the
    expand's output's own gradient."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 4, generator=generator, requires_grad=True)
    a = torch.randn(2, 3, 3, generator=generator, requires_grad=True)
    expanded = x.expand(2, 3, 4)
    expanded.retain_grad()
    (torch.bmm(a, expanded.view(2, 3, 4)) + x).sum().backward()
    assert expanded.grad is not None and x.grad is not None
    assert not torch.allclose(expanded.grad, x.grad)  # the share is not the whole

    explanation = explain(ExpandViewReused(), x.detach().clone().requires_grad_(),
                          a.detach().clone().requires_grad_())
    assert explanation.failures() == []
    found = [arg for walk_pass in explanation.walk.passes for event in walk_pass.events
             if event.node == "BmmBackward0" and event.hook == "node"
             for arg in event.args if arg.name == "grad_inputs[1]"]
    assert len(found) == 2  # one in each pass
    for arg in found:
        assert arg.meaning is not None and arg.meaning.wrt == "x" and arg.meaning.via
        assert "only the part via" in arg.meaning.text
        assert arg.check is not None and arg.check.verified
        assert arg.value is not None and arg.value.value is not None
        torch.testing.assert_close(torch.tensor(arg.value.value),
                                   expanded.grad.reshape(arg.value.shape))


class SelfAttention(nn.Module):
    """scaled_dot_product_attention with the input itself as the values: its math path (the
    one with gradients on CPU) expands and views v into a bmm, and x is used again by q and
    k."""

    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.q, self.k, self.causal = nn.Linear(4, 4), nn.Linear(4, 4), causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = nn.functional.scaled_dot_product_attention(
            self.q(x), self.k(x), x, is_causal=self.causal)
        return out


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_with_the_input_as_values_walks(causal: bool) -> None:
    """It exited 1 with six failed checks; every label now holds, and the input's and each
    parameter's gradient are plain torch's."""
    torch.manual_seed(0)
    model = SelfAttention(causal)
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    model(x).sum().backward()
    assert x.grad is not None
    expected = {"x": x.grad, **{name: parameter.grad for name, parameter
                                 in model.named_parameters()}}
    model.zero_grad(set_to_none=True)
    explanation = explain(model, x.detach().clone().requires_grad_())
    assert explanation.failures() == []
    for walk_pass in explanation.walk.passes:
        finals = {grad.name: grad for grad in walk_pass.grads}
        for name, grad in expected.items():
            assert grad is not None
            value = finals[name].value
            assert value is not None and value.value is not None
            torch.testing.assert_close(torch.tensor(value.value), grad)


class UnsqueezeExpand(nn.Module):
    """An unnamed tensor broadcast along a new dim into bmm: its gradient is summed over it."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 4, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.bmm(x.unsqueeze(0).expand(2, 3, 4), self.w)
        return out


class ExpandIntermediate(nn.Module):
    """tanh(x) broadcast into bmm and used again: the share via the expand, summed over dim 0."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 4, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x)
        out: torch.Tensor = torch.bmm(h.expand(2, 3, 4), self.w) + h.sum()
        return out


def test_an_unnamed_tensor_broadcast_says_which_dims_are_summed() -> None:
    """Its shape was known only for named tensors: an unnamed one's broadcast read "expanded to
    its own shape: nothing summed" on a ✓ label, for a (2, 3, 4) value of a (3, 4) tensor.
    Plain torch: the value summed over dim 0 is the tensor's gradient (through that use)."""
    for model in (UnsqueezeExpand(), ExpandIntermediate()):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2), requires_grad=True)
        explanation = explain(model, x.detach().clone().requires_grad_())
        assert explanation.failures() == []
        summed = [arg for walk_pass in explanation.walk.passes for event in walk_pass.events
                  for arg in event.args
                  if arg.meaning is not None and arg.meaning.layout == "summed"]
        assert summed
        for arg in summed:
            assert arg.meaning is not None and arg.value is not None
            assert arg.meaning.summed_dims == (0,), arg.meaning.text
            assert "nothing summed" not in arg.meaning.text
            assert "before summing over dim 0" in arg.meaning.text
            assert tuple(arg.value.shape) == (2, 3, 4)
        # The expand's own gradient, from plain torch.
        source = x.unsqueeze(0) if isinstance(model, UnsqueezeExpand) else torch.tanh(x)
        expanded = source.expand(2, 3, 4)
        expanded.retain_grad()
        weight = model.w
        out = torch.bmm(expanded, weight)
        if isinstance(model, ExpandIntermediate):
            out = out + source.sum()
        out.sum().backward()
        assert expanded.grad is not None
        for arg in summed:
            assert arg.value is not None and arg.value.value is not None
            torch.testing.assert_close(torch.tensor(arg.value.value), expanded.grad)


class VectorT(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x.t() * 3.0 + x
        return out


class ExpandThenT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(1, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x.expand(1, 4).t() @ self.w
        return out


class LastOpT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = (x * self.w).t()
        return out


class LegacyOnT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = LastOpT()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.m(x) * 2.0
        return out


@pytest.mark.parametrize("model", [VectorT(), ExpandThenT(), LegacyOnT()],
                         ids=["t of a vector", "expand to (1, 4) then t", "legacy hook on t"])
def test_t_of_a_vector_is_no_transpose(model: nn.Module) -> None:
    """`t()` of a 1-D tensor gives it back as it is: labels claimed a transpose of a vector
    ("(∂loss/∂x …)ᵀ"), whose check fails (only a matrix has one): exit 1 on a correct model.
    Every label now holds, and each value labelled as-is with a leaf is that leaf's gradient
    (through the use named) in plain torch."""
    x = torch.randn(4, generator=torch.Generator().manual_seed(4), requires_grad=True)
    explanation = explain(model, x.detach().clone().requires_grad_())
    assert explanation.failures() == []
    meanings = [arg.meaning for walk_pass in explanation.walk.passes
                for event in walk_pass.events for arg in event.args
                if arg.meaning is not None]
    assert meanings and not any(meaning.layout == "transposed" for meaning in meanings)
    model(x).sum().backward()
    assert x.grad is not None
    whole = [arg for walk_pass in explanation.walk.passes for event in walk_pass.events
             for arg in event.args if arg.meaning is not None and arg.meaning.wrt == "x"
             and not arg.meaning.via and arg.meaning.layout == "as-is"
             and arg.meaning.modified_by is None]
    assert whole
    for arg in whole:
        assert arg.value is not None and arg.value.value is not None
        torch.testing.assert_close(torch.tensor(arg.value.value), x.grad)


class Column(nn.Module):
    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(*shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x * self.w
        return out


class ReshapedInPlaceAfterAView(nn.Module):
    """A module's output read by a view, then reshaped in place (`squeeze_`, `unsqueeze_`):
    the view read the shape before."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.m = Column({"expand": (2, 1), "t of a vector": (4,), "t": (4, 1)}[kind])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.m(x)
        if self.kind == "expand":
            read = v.expand(2, 3) * torch.arange(6.0).view(2, 3)
            v.squeeze_(1)
        elif self.kind == "t of a vector":
            read = v.t() * torch.arange(4.0)
            v.unsqueeze_(0)
        else:
            read = v.t() * torch.arange(4.0).view(1, 4)
            v.squeeze_(1)
        out: torch.Tensor = read.sum() + (v * 2.0).sum()
        return out


@pytest.mark.parametrize(("kind", "shape"), [("expand", (2, 1)), ("t of a vector", (4,)),
                                             ("t", (4, 1))])
def test_a_tensor_reshaped_in_place_is_labelled_with_the_shape_its_view_read(
        kind: str, shape: tuple[int, ...]) -> None:
    """Its shape came from the end of the forward: the expand's share summed over dim 0 (a
    ✓ label whose dims were never checked), a vector's no-op t() called a transpose and a
    real transpose not (false ✗). Plain torch gives the share through the view."""
    torch.manual_seed(0)
    model = ReshapedInPlaceAfterAView(kind)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(5), requires_grad=True)
    explanation = explain(model, x.detach().clone().requires_grad_())
    assert explanation.failures() == []
    summed = [arg.meaning for walk_pass in explanation.walk.passes for event in walk_pass.events
              for arg in event.args if arg.meaning is not None
              and arg.meaning.layout == "summed"]
    assert all(meaning.summed_dims == (1,) for meaning in summed)
    assert bool(summed) == (kind == "expand")
    # Plain torch: the gradient of what the view made, through that use alone.
    v = model.m(x)
    if kind == "expand":
        view = v.expand(2, 3)
        read = view * torch.arange(6.0).view(2, 3)
    else:
        view = v.t()
        read = view * (torch.arange(4.0) if kind == "t of a vector"
                       else torch.arange(4.0).view(1, 4))
    view.retain_grad()
    (read.sum() + (v * 2.0).sum()).backward()
    assert view.grad is not None
    share = view.grad.sum(dim=1, keepdim=True) if kind == "expand" else view.grad
    made_by_the_view = ("output:expand", "output:t")
    shares = [arg for walk_pass in explanation.walk.passes for event in walk_pass.events
              for arg in event.args if arg.meaning is not None
              and [use.by for use in arg.meaning.via] in ([name] for name in made_by_the_view)
              and arg.value is not None and arg.value.value is not None]
    assert shares
    for arg in shares:
        assert arg.meaning is not None and arg.value is not None
        got = torch.tensor(arg.value.value)
        if arg.meaning.layout == "summed":
            got = got.sum(dim=arg.meaning.summed_dims, keepdim=True)
        elif arg.meaning.layout == "transposed":
            got = got.t()
        if tuple(got.shape) == tuple(share.shape):
            torch.testing.assert_close(got, share)
        else:
            torch.testing.assert_close(got.reshape(view.grad.shape), view.grad)
