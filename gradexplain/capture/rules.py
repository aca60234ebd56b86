"""One small rule per autograd node type: its local derivative, in symbols. No torch here.

Each rule says, for every input edge of a node, how the gradient `g` arriving at the node's
output becomes that input's share: "upstream x local derivative" in the micrograd sense. The
numbers come from the check run; a node type without a rule gets the generic vector-Jacobian
line, which is checked all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Rule = Callable[[Sequence[str], str], Sequence[str]]


@dataclass(frozen=True)
class Operands:
    """The names a rule writes with: the node's inputs (edge order) and its output."""

    inputs: Sequence[str]
    output: str

    def __getitem__(self, index: int) -> str:
        return self.inputs[index] if index < len(self.inputs) else "?"


def _unary(template: str) -> Rule:
    return lambda inputs, output: [template.format(a=inputs[0] if inputs else "?", out=output)]


def _each(*templates: str) -> Rule:
    def rule(inputs: Sequence[str], output: str) -> Sequence[str]:
        names = Operands(inputs, output)
        return [template.format(a=names[0], b=names[1], c=names[2], out=output)
                for template in templates]
    return rule


RULES: dict[str, Rule] = {
    "SigmoidBackward0": _unary("g ⊙ σ({a})(1 − σ({a}))"),
    "TanhBackward0": _unary("g ⊙ (1 − tanh²({a}))"),
    "ReluBackward0": _unary("g ⊙ [{a} > 0]"),
    "LeakyReluBackward0": _unary("g ⊙ ({a} > 0 ? 1 : slope)"),
    "GeluBackward0": _unary("g ⊙ gelu′({a})"),
    "ExpBackward0": _unary("g ⊙ exp({a})"),
    "LogBackward0": _unary("g / {a}"),
    "SinBackward0": _unary("g ⊙ cos({a})"),
    "CosBackward0": _unary("g ⊙ (−sin({a}))"),
    "SqrtBackward0": _unary("g / (2√{a})"),
    "AbsBackward0": _unary("g ⊙ sign({a})"),
    "NegBackward0": _unary("−g"),
    "CloneBackward0": _unary("g"),
    "PowBackward0": _unary("g ⊙ n·{a}ⁿ⁻¹"),
    "MulBackward0": _each("g ⊙ {b}", "g ⊙ {a}"),
    "MulBackward1": _unary("g ⊙ c (the number)"),
    "DivBackward0": _each("g / {b}", "−g ⊙ {a} / {b}²"),
    "DivBackward1": _unary("g / c (the number)"),
    "AddBackward0": _each("g", "g"),
    "AddBackward1": _unary("g"),
    "SubBackward0": _each("g", "−g"),
    "SubBackward1": _unary("g"),
    "RsubBackward1": _unary("−g"),
    "MmBackward0": _each("g · {b}ᵀ", "{a}ᵀ · g"),
    "MvBackward0": _each("g ⊗ {b}", "{a}ᵀ · g"),
    "DotBackward0": _each("g · {b}", "g · {a}"),
    "AddmmBackward0": _each("Σ_rows g", "g · {c}ᵀ", "{b}ᵀ · g"),
    "BmmBackward0": _each("g · {b}ᵀ", "{a}ᵀ · g"),
    "TBackward0": _unary("gᵀ"),
    "TransposeBackward0": _unary("g transposed back"),
    "PermuteBackward0": _unary("g permuted back"),
    "ViewBackward0": _unary("g reshaped to {a}'s shape"),
    "ReshapeAliasBackward0": _unary("g reshaped to {a}'s shape"),
    "UnsafeViewBackward0": _unary("g reshaped to {a}'s shape"),
    "SqueezeBackward0": _unary("g unsqueezed to {a}'s shape"),
    "SqueezeBackward1": _unary("g unsqueezed to {a}'s shape"),
    "SqueezeBackward4": _unary("g unsqueezed to {a}'s shape"),
    "UnsqueezeBackward0": _unary("g squeezed to {a}'s shape"),
    "ExpandBackward0": _unary("g summed over the broadcast dims"),
    "SumBackward0": _unary("g broadcast to {a}'s shape (∂sum/∂{a} = 1)"),
    "SumBackward1": _unary("g broadcast along the summed dims"),
    "MeanBackward0": _unary("g / n, broadcast to {a}'s shape"),
    "MeanBackward1": _unary("g / n along the averaged dims"),
    "SoftmaxBackward0": _unary("{out} ⊙ (g − Σ g ⊙ {out})"),
    "LogSoftmaxBackward0": _unary("g − softmax({a}) ⊙ Σ g"),
    "SelectBackward0": _unary("g placed into zeros of {a}'s shape"),
    "SliceBackward0": _unary("g placed into zeros of {a}'s shape"),
    "IndexBackward0": _unary("g added into zeros of {a}'s shape at the indices"),
    "SplitBackward0": _unary("the chunks' g joined"),
    "EmbeddingBackward0": _unary("g added into the rows of {a} that were looked up"),
    "ConvolutionBackward0": _each("g ⋆ {b} (transposed convolution)", "{a} ⋆ g", "Σ g per channel"),
    "MaxPool2DWithIndicesBackward0": _unary("g routed to each window's max of {a}"),
    "NativeLayerNormBackward0": _each("LayerNorm′ ⊙ g", "Σ g ⊙ x̂", "Σ g"),
    "torch::autograd::AccumulateGrad": _unary("{a}.grad += g"),
}


def local_derivatives(node: str, inputs: Sequence[str], output: str) -> tuple[list[str], bool]:
    """Per input edge: the formula that turns the output's gradient `g` into this input's
    share, and whether the node type has a rule (else the generic `Jᵀ g` line)."""
    rule = RULES.get(node)
    if rule is None:
        return [f"J_{node}ᵀ g (input {index})" for index in range(len(inputs))], False
    formulas = list(rule(inputs, output))
    formulas += [f"J_{node}ᵀ g (input {index})" for index in range(len(formulas), len(inputs))]
    return formulas[: len(inputs)], True


__all__ = ["RULES", "local_derivatives"]
