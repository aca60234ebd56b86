"""One small rule per autograd node type: its local derivative, in symbols. No torch here.

Each rule says, for every input edge of a node, how the gradient `g` arriving at the node's
output becomes that input's share: "upstream x local derivative" in the micrograd sense. The
numbers come from the check run; a node type without a rule gets the generic vector-Jacobian
line, which is checked all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gradexplain.records.numbers import fmt

Rule = Callable[[Sequence[str], str], Sequence[str]]


@dataclass(frozen=True)
class NodeFacts:
    """What a node's rule depends on beyond its operands' names, read off the node itself
    (torch's saved attributes) and its values in the check run. The defaults are the rule's
    plain case: `alpha` and `beta` 1 (add, sub and addmm scale by them), not `transposed` (a
    transposed convolution's input gradient is an ordinary convolution), no `exponent`
    known (pow), no `padding_idx` (that Embedding row gets no gradient), and per input edge
    whether its share is summed over broadcast dims (`summed`, its shape is not g's), and for
    addmm whether the bias is one row broadcast over g's rows (`rows`)."""

    alpha: float = 1
    beta: float = 1
    transposed: bool = False
    exponent: float | None = None
    padding_idx: int | None = None
    summed: tuple[bool, ...] = ()
    rows: bool = True  # addmm: the bias is one row, broadcast over g's rows


PLAIN = NodeFacts()
# Elementwise rules: an operand broadcast in the forward gets its share summed back to its
# shape, which the formula then says.
_ELEMENTWISE = frozenset({"MulBackward0", "DivBackward0", "AddBackward0", "SubBackward0"})
_SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
SUMMED = ", summed over the broadcast dims"  # a share the engine summed back to its shape


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
    "ReciprocalBackward0": _unary("−g / {a}²"),
    "RsqrtBackward0": _unary("−g / (2·{a}^(3/2))"),
    "SiluBackward0": _unary("g ⊙ σ({a})(1 + {a}(1 − σ({a})))"),
    "CatBackward0": lambda inputs, output: [f"g's part where {name} was joined"
                                            for name in inputs],
    "StackBackward0": lambda inputs, output: [f"g at {name}'s place along the stacked dim"
                                              for name in inputs],
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


def local_derivatives(node: str, inputs: Sequence[str], output: str,
                      facts: NodeFacts = PLAIN) -> tuple[list[str], bool]:
    """Per input edge: the formula that turns the output's gradient `g` into this input's
    share, and whether the node type has a rule (else the generic `Jᵀ g` line). `facts`: what
    else the rule depends on (NodeFacts)."""
    rule = RULES.get(node)
    if rule is None:
        return [_generic(node, index) for index in range(len(inputs))], False
    formulas = list(_with_facts(node, list(rule(inputs, output)), inputs, facts))
    formulas += [_generic(node, index) for index in range(len(formulas), len(inputs))]
    if node in _ELEMENTWISE:
        formulas = [formula + SUMMED
                    if index < len(facts.summed) and facts.summed[index] else formula
                    for index, formula in enumerate(formulas)]
    return formulas[: len(inputs)], True


def _generic(node: str, index: int) -> str:
    return f"J_{node}ᵀ g (input {index})"


def _with_facts(node: str, formulas: list[str], inputs: Sequence[str],
                facts: NodeFacts) -> list[str]:
    """The rule's formulas where the node's facts change them from its plain case."""
    names = Operands(inputs, "")
    alpha, beta = _factor(facts.alpha), _factor(facts.beta)
    if node == "AddBackward0" and len(formulas) > 1:
        formulas[1] = f"{alpha}g"
    elif node == "SubBackward0" and len(formulas) > 1:
        formulas[1] = f"−{alpha}g"
    elif node == "AddmmBackward0" and len(formulas) > 2:
        summed = len(facts.summed) > 0 and facts.summed[0]
        formulas[0] = (f"{beta}Σ_rows g" if facts.rows else
                       f"{beta}g" + (SUMMED if summed else ""))
        formulas[1] = f"{alpha}g · {names[2]}ᵀ"
        formulas[2] = f"{alpha}{names[1]}ᵀ · g"
    elif node == "ConvolutionBackward0" and facts.transposed and formulas:
        # The input's gradient of a transposed convolution is an ordinary convolution; the
        # weight's is left to the generic line.
        formulas[0] = f"g ⋆ {names[1]} (convolution)"
        if len(formulas) > 1:
            formulas[1] = _generic(node, 1)
    elif node == "PowBackward0" and facts.exponent is not None and formulas:
        formulas[0] = f"g ⊙ {fmt(facts.exponent)}·{names[0]}{_power(facts.exponent - 1)}"
    elif node == "EmbeddingBackward0" and facts.padding_idx is not None and formulas:
        formulas[0] += f", except its padding row {facts.padding_idx}, which gets none"
    return formulas


def _factor(value: float) -> str:
    """A scale written before `g`: nothing for 1."""
    return "" if value == 1 else f"{fmt(value)}·"


def _power(value: float) -> str:
    """An exponent as superscript digits where it is a whole number (`²`), else `^(0.5)`."""
    if float(value).is_integer():
        return "" if value == 1 else fmt(value).translate(_SUPERSCRIPTS)
    return f"^({fmt(value)})"


__all__ = ["PLAIN", "RULES", "NodeFacts", "local_derivatives"]
