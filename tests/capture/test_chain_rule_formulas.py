"""The chain rule's formulas are claims too: each says how g becomes a share, and must say it
for the node as torch ran it: the number an operand really is (`2 * x` is computed as x · 2),
the scale factors add, sub and addmm take (`alpha`, `beta`), a share summed back over broadcast
dims, a transposed convolution, pow's exponent, an Embedding's padding row, and a node with
several outputs taking all their gradients back at once.

The oracle is plain torch: each test computes the share with torch.autograd.grad, and computes
the formula it expects from torch's own quantities (g, the operands), which must give that
share; the walk's term must say that formula and hold that value.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import GradientEdge

from gradexplain.api import explain
from gradexplain.records.walk import DerivationLine, Term, Walk
from tests.helpers.capture import capture_text


def _lines(walk: Walk, node: str) -> list[DerivationLine]:
    found = [line for derivation in walk.derivations for line in derivation.lines
             if line.node == node]
    assert found, f"no {node} line"
    return found


def _term(line: DerivationLine, edge: int) -> Term:
    return next(term for term in line.terms if term.edge == edge)


def _value(term: Term) -> torch.Tensor:
    assert term.value is not None and term.value.value is not None
    assert term.check is not None and term.check.verified, term.local
    return torch.tensor(term.value.value, dtype=torch.float64)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want.detach().double().reshape(got.shape), rtol=1e-5,
                               atol=1e-6)


class Model(nn.Module):
    def __init__(self, forward: Callable[..., torch.Tensor], **parameters: torch.Tensor) -> None:
        super().__init__()
        for name, value in parameters.items():
            self.register_parameter(name, nn.Parameter(value))
        self.computed = forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.computed(self, x)


def _explained(model: nn.Module, x: torch.Tensor) -> Walk:
    result = explain(model, x.detach().clone().requires_grad_())
    assert result.failures() == []
    return result.walk


X = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])


@pytest.mark.parametrize(("step", "node", "number"), [
    ("a = 2 * x", "MulBackward0", "2"),
    ("a = x * 2", "MulBackward0", "2"),
    ("a = 8 / x", "MulBackward0", "8"),
])
def test_a_number_written_first_is_the_number_in_the_formula(step: str, node: str,
                                                             number: str) -> None:
    walk = capture_text("name: n\ninputs:\n  x: {value: [1.0, 2.0, 4.0], requires_grad: "
                        f"true}}\nforward: ['{step}', 'z = sum(a)']\nbackward: z\n",
                        "n.yaml").walk
    (line,) = _lines(walk, node)
    (term,) = line.terms
    assert term.local == f"g ⊙ {number}"
    x = torch.tensor([1.0, 2.0, 4.0], requires_grad=True)
    a = eval(step.split("= ", 1)[1], {"x": x})  # the step as plain torch reads it
    (edge,) = [item for item in a.grad_fn.next_functions if item[0] is not None]
    (share,) = torch.autograd.grad(a.sum(), GradientEdge(*edge))
    _close(_value(term), share)
    _close(_value(term), torch.ones(3) * float(number))  # g ⊙ number, g = 1


def test_add_and_sub_scale_by_alpha() -> None:
    b = torch.full((2, 3), 0.5)
    for op, alpha, formula, sign in ((torch.add, 3.0, "3·g", 1), (torch.sub, 2.0, "−2·g", -1)):
        model = Model(lambda module, x, op=op, alpha=alpha: op(x, module.b, alpha=alpha) * x,
                      b=b.clone())
        walk = _explained(model, X)
        line = _lines(walk, "AddBackward0" if op is torch.add else "SubBackward0")[0]
        term = _term(line, 1)
        assert term.local == formula
        leaf, bias = X.clone().requires_grad_(), b.clone().requires_grad_()
        out = op(leaf, bias, alpha=alpha)
        g = leaf.detach()  # d(out * x)/d(out)
        (share,) = torch.autograd.grad((out * leaf).sum(), bias)
        _close(_value(term), share)
        _close(_value(term), sign * alpha * g)


@pytest.mark.parametrize(("bias", "bias_formula"), [
    (torch.full((2,), 0.5), "2·Σ_rows g"),
    (torch.full((2, 2), 0.5), "2·g"),
])
def test_addmm_scales_by_beta_and_alpha(bias: torch.Tensor, bias_formula: str) -> None:
    weight = torch.tensor([[1.0, -2.0], [0.5, 1.0], [3.0, 0.25]])
    model = Model(lambda module, x: torch.addmm(module.c, x, module.w, beta=2, alpha=3) ** 2,
                  c=bias.clone(), w=weight.clone())
    walk = _explained(model, X)
    (line,) = _lines(walk, "AddmmBackward0")
    assert [_term(line, edge).local for edge in range(3)] == [
        bias_formula, "3·g · wᵀ", "3·xᵀ · g"]
    c, x, w = (item.clone().requires_grad_() for item in (bias, X, weight))
    out = torch.addmm(c, x, w, beta=2, alpha=3)
    g = 2 * out.detach()
    shares = torch.autograd.grad((out ** 2).sum(), (c, x, w))
    for edge, share in enumerate(shares):
        _close(_value(_term(line, edge)), share)
    _close(_value(_term(line, 0)), 2 * (g.sum(0) if bias.dim() == 1 else g))
    _close(_value(_term(line, 1)), 3 * g @ weight.t())
    _close(_value(_term(line, 2)), 3 * X.t() @ g)


def test_a_broadcast_operand_has_its_share_summed() -> None:
    model = Model(lambda module, x: (x * module.b) ** 2, b=torch.tensor([1.0, -0.5, 2.0]))
    walk = _explained(model, X)
    line = _lines(walk, "MulBackward0")[0]
    assert _term(line, 1).local == "g ⊙ x, summed over the broadcast dims"
    assert _term(line, 0).local == "g ⊙ b"
    x, b = X.clone().requires_grad_(), torch.tensor([1.0, -0.5, 2.0], requires_grad=True)
    out = x * b
    (share,) = torch.autograd.grad((out ** 2).sum(), b)
    _close(_value(_term(line, 1)), share)
    _close(_value(_term(line, 1)), (2 * out.detach() * X).sum(0))


def test_a_transposed_convolution_takes_its_input_gradient_by_convolution() -> None:
    weight = torch.randn(1, 1, 3, 3, generator=torch.Generator().manual_seed(0))
    model = Model(lambda module, x: F.conv_transpose2d(x, module.w, stride=2) ** 2,
                  w=weight.clone())
    x0 = torch.randn(1, 1, 2, 2, generator=torch.Generator().manual_seed(1))
    walk = _explained(model, x0)
    (line,) = _lines(walk, "ConvolutionBackward0")
    assert _term(line, 0).local == "g ⋆ w (convolution)"
    x = x0.clone().requires_grad_()
    out = F.conv_transpose2d(x, weight, stride=2)
    (share,) = torch.autograd.grad((out ** 2).sum(), x)
    _close(_value(_term(line, 0)), share)
    _close(_value(_term(line, 0)), F.conv2d(2 * out.detach(), weight, stride=2))


def test_pow_says_its_exponent() -> None:
    walk = _explained(Model(lambda module, x: x ** 3), X)
    (line,) = _lines(walk, "PowBackward0")
    assert line.terms[0].local == "g ⊙ 3·x²"
    _close(_value(line.terms[0]), 3 * X ** 2)


def test_an_embedding_says_its_padding_row_gets_nothing() -> None:
    class Looked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(4, 2, padding_idx=0)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            looked: torch.Tensor = self.emb(torch.tensor([0, 1, 0, 3]))
            return looked * x

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Looked()
    walk = _explained(model, torch.ones(4, 2))
    (line,) = _lines(walk, "EmbeddingBackward0")
    assert "except its padding row 0, which gets none" in line.terms[0].local
    assert torch.all(_value(line.terms[0])[0] == 0)


@pytest.mark.parametrize(("split", "used"), [
    (lambda h: h.unbind(1), (0, 2)),
    (lambda h: h.chunk(3, dim=1), (0, 1, 2)),
])
def test_a_node_with_several_outputs_takes_all_their_gradients(
        split: Callable[[torch.Tensor], tuple[torch.Tensor, ...]], used: tuple[int, ...]) -> None:
    def forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        parts = split(x * 2)
        return sum((parts[index] * (index + 1) for index in used), torch.zeros(()))

    walk = _explained(Model(forward), X)
    name = "UnbindBackward0" if len(used) == 2 else "SplitBackward0"
    (line,) = _lines(walk, name)
    # torch: the outputs that got a gradient are the ones the loss used
    h = (X * 2).requires_grad_()
    parts = split(h)
    loss = torch.zeros(())
    for index in used:
        loss = loss + (parts[index] * (index + 1)).sum()
    with_gradient = [index for index, part in enumerate(parts)
                     if torch.autograd.grad(loss, part, allow_unused=True,
                                            retain_graph=True)[0] is not None]
    assert len(line.others) + 1 == len(with_gradient) == len(used)


def test_a_named_tensor_without_grad_keeps_its_name() -> None:
    # c holds one number, but the spec names it: the formula says c, as written (torch keeps
    # a tensor's operand order: c * x is c · x).
    walk = capture_text("name: c\ninputs:\n  x: {value: [1.0, 2.0], requires_grad: true}\n"
                        "  c: {value: [3.0]}\nforward: ['a = c * x', 'z = sum(a)']\n"
                        "backward: z\n", "c.yaml").walk
    (line,) = _lines(walk, "MulBackward0")
    (term,) = line.terms
    assert term.local == "g ⊙ c"
    _close(_value(term), torch.full((2,), 3.0))


@pytest.mark.parametrize(("node", "forward", "formula", "local"), [
    ("ReciprocalBackward0", lambda x: x.reciprocal(), "−g / x²", lambda x, g: -g / x ** 2),
    ("RsqrtBackward0", lambda x: x.rsqrt(), "−g / (2·x^(3/2))",
     lambda x, g: -g / (2 * x ** 1.5)),
    ("SiluBackward0", F.silu, "g ⊙ σ(x)(1 + x(1 − σ(x)))",
     lambda x, g: g * torch.sigmoid(x) * (1 + x * (1 - torch.sigmoid(x)))),
])
def test_a_unary_rule_computes_its_share(node: str, forward: Callable[[torch.Tensor], torch.Tensor],
                                         formula: str,
                                         local: Callable[[torch.Tensor, torch.Tensor],
                                                         torch.Tensor]) -> None:
    positive = X.abs() + 0.5  # rsqrt and reciprocal stay finite
    walk = _explained(Model(lambda module, x: forward(x) ** 2), positive)
    (line,) = _lines(walk, node)
    (term,) = line.terms
    assert term.local == formula
    x = positive.clone().requires_grad_()
    out = forward(x)
    (share,) = torch.autograd.grad((out ** 2).sum(), x)
    _close(_value(term), share)
    _close(_value(term), local(positive, 2 * out.detach()))


def test_cat_and_stack_hand_each_input_its_part_of_g() -> None:
    def forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        joined = torch.cat([x, x * 2], dim=1)
        return torch.stack([joined, joined * 3]) ** 2

    walk = _explained(Model(forward), X)
    (cat,) = _lines(walk, "CatBackward0")
    (stack,) = _lines(walk, "StackBackward0")
    assert all("was joined" in term.local for term in cat.terms)
    assert all("along the stacked dim" in term.local for term in stack.terms)
    x = X.clone().requires_grad_()
    doubled = x * 2
    joined = torch.cat([x, doubled], dim=1)
    tripled = joined * 3
    out = torch.stack([joined, tripled])
    g = 2 * out.detach()
    shares = torch.autograd.grad((out ** 2).sum(), [x, doubled], retain_graph=True)
    # g's part where each was joined: columns 0:3 for x, 3:6 for x * 2 (of the cat's g)
    cat_g = g[0] + 3 * g[1]
    cat_terms = sorted(cat.terms, key=lambda term: term.edge or 0)
    _close(_value(cat_terms[0]), cat_g[:, :3])
    _close(_value(cat_terms[1]), cat_g[:, 3:])
    assert torch.allclose(cat_g[:, :3] + 2 * cat_g[:, 3:], shares[0])
    stack_terms = sorted(stack.terms, key=lambda term: term.edge or 0)
    _close(_value(stack_terms[0]), g[0])
    _close(_value(stack_terms[1]), g[1])
