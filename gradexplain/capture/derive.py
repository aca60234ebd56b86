"""The chain rule of each backward or autograd.grad call, node by node from the output back to
the leaves: upstream gradient x each edge's local derivative (`rules`), every term checked
against the hook-free run.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass, replace

import torch
from torch.autograd.graph import Node

from gradexplain.capture.checks import check, says_too_little
from gradexplain.capture.label import VIEWS
from gradexplain.capture.replay import Replay, RunValues
from gradexplain.capture.rules import NodeFacts, local_derivatives
from gradexplain.capture.user_changes import Changes
from gradexplain.capture.values import tensor_value
from gradexplain.language.expr import BinOp, Name, Number
from gradexplain.language.model import ModelSpec
from gradexplain.records.graph import GraphView, Position
from gradexplain.records.names import ACCUMULATE, Naming, canonical_name, distinct
from gradexplain.records.numbers import fmt
from gradexplain.records.trace import PassTrace, TensorValue
from gradexplain.records.walk import Derivation, DerivationLine, Place, Term


def derivations(spec: ModelSpec, trace: PassTrace, view: GraphView,
                 replay: Replay, naming: Naming) -> tuple[Derivation, ...]:
    """The chain rule of each distinct call, node by node from the output back to the leaves."""
    done: dict[int, int] = {}
    derivations: list[Derivation] = []
    operands = _written_operands(spec)
    changes = Changes(trace, view)
    names = ChainNames(view, naming)
    def node_at(rank: int) -> Node | None:
        return replay.order[rank] if rank < len(replay.order) else None

    for run in trace.runs:
        values = replay.runs.get(run.index)
        if values is None or run.failed:
            continue  # torch refused this call: there is no chain rule to show
        if id(values) in done:
            first = done[id(values)]
            derivations[first] = replace(derivations[first],
                                         repeats=(*derivations[first].repeats, run.index))
            continue
        done[id(values)] = len(derivations)
        traced = _traced(trace, run.index)
        shown_output = _shown_outputs(values)
        lines = [_line(view, values, shown_output, node, traced.get(node), operands, names,
                       _changed_by(changes, run.index, node), node_at) for node in
                 _topological(view, set(traced))]
        derivations.append(Derivation(run.index, run.kind, run.of,
                                      None if values.seed is None else tensor_value(values.seed),
                                      tuple(lines)))
    return tuple(derivations)


def _topological(view: GraphView, ran: set[str]) -> list[str]:
    """The nodes torch ran in this call, each after every node that feeds it (ties: graph
    order). An autograd.grad call runs only what its `wrt` needs."""
    active = [node for node in view.order if node in ran]
    waiting = dict.fromkeys(active, 0)
    for position, users in view.consumers.items():
        if position[0] in waiting:
            waiting[position[0]] += sum(1 for user, _ in users if user in ran)
    ready = [node for node in active if waiting[node] == 0]
    order: list[str] = []
    while ready:
        ready.sort(key=lambda node: view.rank[node])
        node = ready.pop(0)
        order.append(node)
        for child, output in view.nodes[node].next:
            target = view.resolve((child, output))
            if target is not None and target[0] in waiting:
                waiting[target[0]] -= 1
                if waiting[target[0]] == 0:
                    ready.append(target[0])
    return order


def _changed_by(changes: Changes, run: int, node: str) -> Callable[[int | None], str | None]:
    """Which of the user's hooks changed what the pass saw at `node` (its edge, or None: what
    arrives at it): that term shows the hook-free value, unchecked."""
    return lambda number: changes.of_edge(run, node, number) if changes else None


# How a formula names an operand with no graph edge that the spec does not name.
NO_GRAD_OPERAND = "(a tensor without grad)"
# The ops a step writes with an operator, by the name part a nested one gets (`loss:mul` for
# the `w * x` in `loss = sum(w * x)`: records.graph.GraphView.synthetic_name).
OPERATORS = {"*": "mul", "+": "add", "-": "sub", "/": "div"}


def _written_operands(spec: ModelSpec) -> dict[str, tuple[str | None, ...]]:
    """For each step `t = a op b`, the operands as written, by every name of `t`: a number or
    a tensor that needs no gradient has no graph edge, and is named from here instead. An
    operator nested in a step (`loss = sum(w * x)`) is found by its synthetic name
    (`loss:mul`), where the step has only one of its kind."""
    found: dict[str, tuple[str | None, ...]] = {}
    for module in spec.root.all_modules():
        for step in module.steps:
            if len(step.targets) != 1:
                continue
            target = module.qualify(step.targets[0])
            expr = step.assignment.expr
            if isinstance(expr, BinOp):
                found[target] = _operands(expr)
            nested = [item for item in _subexpressions(expr)
                      if isinstance(item, BinOp) and item is not expr]
            kinds = Counter(item.op for item in nested)
            for item in nested:
                if kinds[item.op] == 1 and item.op in OPERATORS:
                    found[f"{target}:{OPERATORS[item.op]}"] = _operands(item)
    return found


def _operands(expr: BinOp) -> tuple[str | None, ...]:
    return tuple(_written(side) for side in (expr.left, expr.right))


def _subexpressions(expr: object) -> Iterator[object]:
    """`expr` and every expression inside it."""
    yield expr
    if is_dataclass(expr):
        for item in fields(expr):
            value = getattr(expr, item.name)
            for child in value if isinstance(value, tuple) else (value,):
                if is_dataclass(child):
                    yield from _subexpressions(child)


def _written(expr: object) -> str | None:
    if isinstance(expr, Name):
        return expr.id
    if isinstance(expr, Number):
        return str(expr.value)
    return None


def _shown_outputs(values: RunValues) -> dict[int, list[int]]:
    """Each node's outputs that got a gradient, by the node's rank: a line is shown by the
    first, and names the rest. A node with several outputs (nn.LSTM's RNN node: out, h, c)
    with a loss of h only has None for output 0. Found in one pass over the call's
    gradients, not per node."""
    shown: dict[int, list[int]] = {}
    for rank, number in sorted(values.totals):
        if values.totals[(rank, number)] is not None:
            shown.setdefault(rank, []).append(number)
    return shown


def _line(view: GraphView, values: RunValues, shown_output: dict[int, list[int]], node: str,
          traced: list[TensorValue | None] | None,
          operands: dict[str, tuple[str | None, ...]],
          names: ChainNames, changed_by: Callable[[int | None], str | None],
          node_at: Callable[[int], Node | None]) -> DerivationLine:
    """One node: `traced` is what the traced pass saw flow out of it (see `_traced`),
    `shown_output` the output each node is shown by (`_shown_outputs`), `node_at` the check
    run's node of a rank (what its rule depends on: `_facts`)."""
    rank = view.rank[node]
    name = view.name_of(node)
    naming = names.naming
    number, *more = shown_output.get(rank, [0])
    output = names.name((node, number))
    others = tuple(names.name((node, item)) for item in more)
    upstream = values.totals.get((rank, number))
    if name == ACCUMULATE:
        seen = traced[0] if traced else None
        changer = changed_by(None)
        result = (None if seen is None or upstream is None or changer is not None
                  or says_too_little(seen) else check(seen, upstream))
        term = Term(output, f"{naming.short(output)}.grad += g", tensor_value(upstream), result,
                    modified_by=changer, at=(rank, 0))
        return DerivationLine(name, output, tensor_value(upstream), (term,), True,
                              (rank, number))
    edges = view.nodes[node].next
    below = [view.resolve(edge) for edge in edges]
    inputs = [names.name(position) for position in below]
    known = [*view.names.get((node, 0), []), names.name((node, 0))]
    written = next((operands[item] for item in known if item in operands), ())
    checked = node_at(rank)
    shown = list(inputs)
    for index, item in enumerate(inputs):
        if item == "None":
            # No edge: a number or a tensor without grad. Named as written where the spec
            # says; a number written, or one a Python model used, is read off the node (torch
            # puts a tensor first: `2 * x` is x · 2, against the order written); else said
            # what it is (never `None`).
            replacement = written[index] if index < len(written) else None
            constant = _number_operand(checked, name, index)
            if any(_is_number(item) for item in written) or replacement is None:
                replacement = constant or replacement  # the number torch used, where it went
            shown[index] = replacement or NO_GRAD_OPERAND
    shares = [values.edges.get((rank, index)) for index in range(len(edges))]
    formulas, has_rule = local_derivatives(
        name, [_operand(item, naming) for item in shown], _operand(output, naming),
        _facts(checked, upstream, shares))
    terms = []
    for index, (wrt, formula) in enumerate(zip(inputs, formulas, strict=True)):
        seen = traced[index] if traced is not None and index < len(traced) else None
        if edges[index][0] is None or seen is None:
            continue  # no input there, or torch did not need it in this call
        share = values.edges.get((rank, index))
        changer = changed_by(index)
        result = (None if share is None or changer is not None or says_too_little(seen)
                  else check(seen, share))
        terms.append(Term(wrt, formula, tensor_value(share), result, modified_by=changer,
                          at=names.place(below[index]), edge=index))
    return DerivationLine(name, output, tensor_value(upstream), tuple(terms), has_rule,
                          (rank, number), others)


# The saved operand of each edge of the nodes whose rule names the other operand.
_SAVED_OPERANDS = {"MulBackward0": ("_saved_self", "_saved_other"),
                   "DivBackward0": ("_saved_self", "_saved_other")}


def _is_number(written: str | None) -> bool:
    try:
        float(written or "")
    except ValueError:
        return False
    return True


def _number_operand(node: Node | None, name: str, index: int) -> str | None:
    """The number a node computed with at edge `index`, where that edge has no graph edge
    and the node saved it (a Python number, or a one-element tensor without grad)."""
    attributes = _SAVED_OPERANDS.get(name)
    if node is None or attributes is None or index >= len(attributes):
        return None
    saved = _saved(node, attributes[index], None)
    if not isinstance(saved, torch.Tensor) or saved.numel() != 1:
        return None
    return fmt(saved.item())


def _facts(node: Node | None, upstream: torch.Tensor | None,
           shares: list[torch.Tensor | None]) -> NodeFacts:
    """What the node's rule depends on (NodeFacts): its saved scale factors and flags, and
    which shares the engine summed over broadcast dims (shaped unlike g)."""
    summed = tuple(share is not None and upstream is not None and share.shape != upstream.shape
                   for share in shares)
    if node is None:
        return NodeFacts(summed=summed)
    padding = _saved(node, "_saved_padding_idx", None)
    exponent = _saved(node, "_saved_exponent", None)
    bias = shares[0] if shares else None
    rows = (bias is not None and upstream is not None and upstream.dim() == 2
            and bias.numel() == upstream.shape[1] and bias.shape[-1:] == upstream.shape[1:])
    return NodeFacts(
        alpha=_number(_saved(node, "_saved_alpha", 1), 1),
        beta=_number(_saved(node, "_saved_beta", 1), 1),
        transposed=_saved(node, "_saved_transposed", False) is True,
        exponent=None if isinstance(exponent, torch.Tensor) or exponent is None
        else _number(exponent, 1),
        # torch keeps -1 (no padding row) as an unsigned 64-bit number
        padding_idx=padding if isinstance(padding, int) and 0 <= padding < 2 ** 63 else None,
        summed=summed, rows=rows)


def _saved(node: Node, attribute: str, default: object) -> object:
    try:
        return getattr(node, attribute, default)
    except RuntimeError:  # a saved tensor already freed
        return default


def _number(value: object, default: float) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def _traced(trace: PassTrace, run: int) -> dict[str, list[TensorValue | None]]:
    """Each node torch ran in this run, with what the traced pass saw flowing out of it: its
    Node hook's grad_inputs, or for a leaf's AccumulateGrad what its pre-hook received."""
    found: dict[str, list[TensorValue | None]] = {}
    for event in trace.events:
        if event.run != run or event.node_id is None:
            continue
        if event.hook == "node" and event.node != ACCUMULATE:
            found[event.node_id] = [arg.value for arg in event.args
                                    if arg.name.startswith("grad_inputs")]
        elif event.hook == "node_pre" and event.node == ACCUMULATE:
            found[event.node_id] = [arg.value for arg in event.args]
    return found


@dataclass
class ChainNames:
    """Each tensor's name in the chain rule, no two tensors alike: its own name or synthetic
    name (GraphView, the same as the labels give it), else what it is a view of (`weightᵀ`).
    A view made again for each call of a layer (its weight transposed at every time step)
    would read the same each time: the first made keeps the description, later ones are
    `weightᵀ@2`, `weightᵀ@3`, ... as records.names.distinct numbers them."""

    view: GraphView
    naming: Naming

    def __post_init__(self) -> None:
        view = self.view
        positions = sorted({(node, 0) for node in view.order} | set(view.consumers),
                           key=view.made_order)
        self.names: dict[Position, str] = {}
        described: list[tuple[Position, str]] = []
        for position in positions:
            name = _tensor_name(view, position, self.naming)
            if view.names.get(position) or name == view.synthetic_name(position):
                self.names[position] = name
            else:
                described.append((position, name))
        taken = set(self.names.values()) | {name for names in view.names.values()
                                             for name in names}
        self.names.update(distinct(described, taken))

    def name(self, position: Position | None) -> str:
        if position is None:
            return "None"
        return self.names.get(position) or _tensor_name(self.view, position, self.naming)

    def place(self, position: Position | None) -> Place | None:
        return None if position is None else (self.view.rank[position[0]], position[1])


def _tensor_name(view: GraphView, position: tuple[str, int] | None, naming: Naming) -> str:
    """A tensor's name in the derivation: its own, what it is a view of when that has a name
    (`weightᵀ`, `x (reshaped)`), else its synthetic name, the one the labels give it too."""
    if position is None:
        return "None"
    return _described(view, position, naming, frozenset()) or view.synthetic_name(position)


def _described(view: GraphView, position: tuple[str, int], naming: Naming,
               seen: frozenset[tuple[str, int]]) -> str | None:
    """A tensor's own name, or a view's description that bottoms out in a named tensor; None
    when it does not (a reshape of an unnamed tensor is named by its op, as labels name it).
    `seen`: the positions already asked about on the way here, so that asking stops."""
    own = canonical_name(view.names.get(position, []))
    if own is not None:
        return own
    seen = seen | {position}
    node = view.nodes[position[0]]
    kind = VIEWS.get(node.name)
    if kind is not None and node.next and node.next[0][0] is not None:
        below = view.resolve(node.next[0])
        if below is not None and below not in seen:
            base = _described(view, below, naming, seen)
            if base is None:
                return None
            short = naming.short(base)
            return f"{short}ᵀ" if kind == "transpose" else f"{short} ({kind}ed)" \
                if kind == "expand" else f"{short} (reshaped)"
    users = view.consumers.get(position, [])
    if len(users) == 1 and VIEWS.get(view.name_of(users[0][0])) in ("reshape", "transpose") \
            and (users[0][0], 0) not in seen:
        above = _described(view, (users[0][0], 0), naming, seen)
        return None if above is None else f"{naming.short(above)} (reshaped)"
    return None


def _operand(name: str, naming: Naming) -> str:
    """A name as it reads inside a formula: `weightᵀ` becomes `(weightᵀ)`, so `(weightᵀ)ᵀ`;
    a number as it is (`-2.5`), and what is already in brackets as it is."""
    short = naming.short(name)
    if re.fullmatch(r"[\w@:#.]+|-?[\d.]+(e[-+]?\d+)?|\(.*\)", short, re.ASCII):
        return short
    return f"({short})"


__all__ = ["ChainNames", "derivations"]
