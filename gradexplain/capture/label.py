"""Labels: which derivative each hook argument is, read structurally from the recorded graph.

Never from values (they coincide: dz/dz = 1, zeros, equal gradients). For each gradient argument
this finds the graph position it belongs to and the edges its value is the sum of:
- a legacy module hook is a post-hook of the module's last node: `grad_input[i]` is that node's
  i-th edge (operand order of the last op), `grad_output[j]` its j-th output;
- a full hook sits on the HOOK_WRAPPER nodes around a module: `grad_input[i]` is the i-th
  positional input, `grad_output[j]` the j-th output;
- tensor hooks see the whole gradient of their tensor, Node hooks their node's edges and outputs.
An unnamed position is described through the views that lead to a named tensor (a transposed
weight, a reshaped layer output); a value that is only some of a tensor's edges says so.
A gradient no real edge carries is zeros, labelled as such: a full hook's wrapper hands zeros to
an input the module never uses, and the engine passes them on to nodes (and leaves) the output
does not depend on, which the hook-free graph does not even contain.
The result is a claim (`Meaning`) and how to compute it independently (`Site`); `verify` checks.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from dataclasses import dataclass, replace
from functools import cache

from gradexplain.records.claims import claim_text
from gradexplain.records.frozen import quick_init
from gradexplain.records.graph import Edge, GraphView, Position
from gradexplain.records.names import Naming, canonical_name
from gradexplain.records.trace import Arg, Event, ModuleCall, PassTrace, Run
from gradexplain.records.walk import Layout, Meaning, Use

# Nodes whose output is a view of their single input: (kind, layout word).
VIEWS = {
    "TBackward0": "transpose",
    "ViewBackward0": "reshape",
    "ReshapeAliasBackward0": "reshape",
    "UnsafeViewBackward0": "reshape",
    "SqueezeBackward0": "reshape",
    "SqueezeBackward1": "reshape",
    "SqueezeBackward4": "reshape",
    "UnsqueezeBackward0": "reshape",
    "ExpandBackward0": "expand",
}

Ranked = tuple[int, int]


@quick_init
@dataclass(frozen=True)
class Site:
    """Where a claim is evaluated: the backward or grad call whose gradients it is about.
    Everything else the check needs is in the claim itself (`Meaning`), never the edges the
    labeller followed."""

    run: int


@quick_init
@dataclass(frozen=True)
class Source:
    """Where in the graph the value itself flows, before views are looked through: in call
    `run`, the gradient of the tensor at `place`, along `edges` only (each (consumer rank,
    input number); None: all of it), or (`grad`) a leaf's `.grad`. What pins the argument to
    its chain-rule step (capture/pins.py); never used by the check."""

    run: int
    place: Ranked
    edges: tuple[Ranked, ...] | None = None
    grad: bool = False


@quick_init
@dataclass(frozen=True)
class Label:
    """A claim and the call it is about. `place` is where the labeller found the tensor it
    names (rank, output number): not used by the check, which finds it by name; tests use it
    to prove that names and tensors match one to one. `source`: see Source."""

    meaning: Meaning | None
    site: Site | None
    place: Ranked | None = None
    source: Source | None = None


NO_LABEL = Label(None, None)


@quick_init
@dataclass(frozen=True)
class EventLabels:
    event: Event
    labels: tuple[Label, ...]
    why: str | None
    call: int | None = None  # for module backward hooks: the index of the ModuleCall it serves


def label_pass(trace: PassTrace, naming: Naming) -> tuple[GraphView, list[EventLabels]]:
    """Every event of the pass with a label for each argument."""
    labeller = _Labeller(trace, naming)
    return labeller.view, [labeller.event(event) for event in trace.events]


class _Labeller:
    def __init__(self, trace: PassTrace, naming: Naming) -> None:
        self.naming = naming
        self.arg_shape: tuple[int, ...] = ()  # the argument being labelled
        self.trace = trace
        self.view = GraphView(trace)
        self.reachable: dict[int, set[str]] = {
            run.index: self.view.reachable(self.view.resolve(self.view.raw_position(run.root)))
            for run in trace.runs
        }
        # Each output wrapper's full pre-hook calls, in firing order: (seqs, runs).
        self.pre_hooks: dict[str, tuple[list[int], list[int]]] = {}
        for event in trace.events:
            if event.hook == "full_backward_pre" and event.node_id is not None:
                seqs, runs = self.pre_hooks.setdefault(event.node_id, ([], []))
                seqs.append(event.seq)
                runs.append(event.run)
        self.seeded: dict[int, set[Position]] = {
            run.index: self.seed_chain(self.view.raw_position(run.root)) for run in trace.runs
        }
        # The calls indexed once: a module called N times in a loop has N calls and about N
        # hook events each looking one up, so scanning the calls per event was quadratic.
        # Each key keeps its first call, as the scans in call order found.
        self.legacy_calls: dict[tuple[str, str | None], int] = {}
        self.full_calls: dict[tuple[str, str | None], int] = {}
        self.wrappers: list[tuple[str | None, str | None]] = []  # each call's (in, out)
        self.input_wrapper_calls: dict[str | None, list[int]] = {}
        inputs_wrapped = {self.wrapper_of(call.inputs) for call in trace.calls}
        outputs_wrapped: set[str] = set()
        for number, call in enumerate(trace.calls):
            self.legacy_calls.setdefault((call.module, call.legacy_node), number)
            wrapper_in = self.wrapper_of(call.inputs)
            wrapper_out = self.output_wrapper(call, wrapper_in, inputs_wrapped, outputs_wrapped)
            if wrapper_out is not None:
                outputs_wrapped.add(wrapper_out)
            self.wrappers.append((wrapper_in, wrapper_out))
            self.full_calls.setdefault((call.module, wrapper_in), number)
            self.full_calls.setdefault((call.module, wrapper_out), number)
            self.input_wrapper_calls.setdefault(wrapper_in, []).append(number)
        # consumers_within per (position, run), and the input numbers each consumer reads
        # there: a weight a loop uses N times has N consumers, asked about once per event.
        self.within: dict[tuple[Position, int], frozenset[Edge]] = {}
        self.reads: dict[tuple[Position, int], dict[str, list[int]]] = {}
        self.described: dict[tuple[int, Position, frozenset[Edge] | None, tuple[int, ...]],
                             Label] = {}
        # Each tensor a call's forward got from its full hooks' wrapper, to the caller's own.
        self.unwrapped: dict[int, int] = {
            given: own for call in trace.calls
            for given, own in zip(call.inputs, call.arguments, strict=False)
            if given is not None and own is not None and given != own}

    def seed_chain(self, raw: Position | None) -> set[Position]:
        """The raw positions the seed gradient arrives at: the root and, when it is a full
        hook's wrapper output, every wrapper output below it down to the real tensor."""
        chain: set[Position] = set()
        while raw is not None and raw not in chain:
            chain.add(raw)
            if not self.view.is_identity(raw[0]):
                break
            child, number = self.view.nodes[raw[0]].next[raw[1]]
            raw = None if child is None else (child, number)
        return chain

    # --- events -------------------------------------------------------------------------------

    def event(self, event: Event) -> EventLabels:
        if event.run == 0:
            return EventLabels(event, tuple(NO_LABEL for _ in event.args), None)
        run = self.trace.runs[event.run - 1]
        labels = tuple(self.arg(event, run, arg) for arg in event.args)
        return EventLabels(event, labels, self.why(event), self.call_of(event))

    def call_of(self, event: Event) -> int | None:
        """Which call of its module a backward hook serves: a legacy hook the call whose last
        node it sits on, a full hook the call whose wrappers it sits on."""
        if event.hook == "backward":
            return self.legacy_calls.get((event.target, event.node_id))
        if event.hook in ("full_backward_pre", "full_backward"):
            return self.full_calls.get((event.target, event.node_id))
        return None

    def arg(self, event: Event, run: Run, arg: Arg) -> Label:
        if arg.value is None:
            return NO_LABEL
        name, index = _split(arg.name)
        hook, node = event.hook, event.node_id
        self.arg_shape = arg.value.shape
        if hook == "tensor":
            record = self.trace.named(event.target)
            return self.whole(run, self.view.raw_position(record.index if record else None))
        if hook == "post_accumulate_grad":
            return self.accumulated(run, event.target)
        if node is None or node not in self.view.nodes:
            return NO_LABEL
        if name in ("grad_outputs", "grad_output") and hook in ("node_pre", "node", "backward"):
            return self.whole(run, (node, index))
        if name in ("grad_inputs", "grad_input") and hook in ("node", "backward"):
            return self.edge(run, node, index)
        if hook in ("full_backward_pre", "full_backward"):
            return self.full(event, run, name, index)
        return NO_LABEL

    def full(self, event: Event, run: Run, name: str, index: int) -> Label:
        """Full hooks: grad_input[i] is the i-th positional input, grad_output[j] the j-th
        output, each read at the wrapper node that carries it."""
        call, wrapper_in, wrapper_out = self.full_call(event)
        if call is None:
            return NO_LABEL
        if name == "grad_output":
            if wrapper_out is None or call.outputs[index] is None:
                return NO_LABEL
            raw = (wrapper_out, _tensor_rank(call.outputs, index))
            earlier = (self.stale_from(event, wrapper_out) if event.hook == "full_backward"
                       else None)  # a pre-hook is handed what its output wrapper sees now
            if earlier is not None:
                return self.stale(run, earlier, raw, call)
            return self.whole(run, raw)
        if wrapper_in is None or call.inputs[index] is None:
            return NO_LABEL
        rank = _tensor_rank(call.inputs, index)
        if self.view.nodes[wrapper_in].next[rank][0] is None:
            return self.zeros(run, call, index)
        return self.whole(run, (wrapper_in, rank))

    def stale_from(self, event: Event, wrapper_out: str) -> Run | None:
        """The earlier call whose grad_output a full hook is handed, when this call never
        passed the module's output: torch's BackwardHook keeps the grad_output its output
        wrapper saw last (a full pre-hook event) until the input wrapper's hook uses it, so a
        call that passed the output but never reached the input (torch refused it, or an
        autograd.grad stopped short) leaves it for the next call that reaches the input."""
        seqs, runs = self.pre_hooks.get(wrapper_out, ([], []))
        last = bisect_left(seqs, event.seq) - 1
        if last < 0 or runs[last] == event.run:
            return None
        return self.trace.runs[runs[last] - 1]

    def stale(self, run: Run, earlier: Run, raw: Position, call: ModuleCall) -> Label:
        """A grad_output left by call `earlier`: its gradient at the module's output."""
        position = self.view.resolve(raw)
        if position is None:
            return NO_LABEL
        names = self.view.names.get(position, [])
        wrt = self.view.tensor_name(position)
        short = self.naming.short(wrt)
        module = call.module or "the model"
        text = (f"stale: ∂{earlier.of}/∂{short} from call {earlier.index}, kept by torch "
                f"(that call passed {module}'s output but never reached its input; this one "
                f"reaches its input without passing its output)")
        latex = (rf"\frac{{\partial {self.naming.latex(earlier.of)}}}"
                 rf"{{\partial {self.naming.latex(short)}}}\ \text{{(stale, call "
                 rf"{earlier.index})}}")
        meaning = Meaning(earlier.of, wrt, _aliases(names, wrt), "as-is", text, latex,
                          kind="stale", stale_from=earlier.index)
        place = (self.view.rank[position[0]], position[1])
        return Label(meaning, Site(run.index), place, Source(earlier.index, place))

    def full_call(self, event: Event) -> tuple[ModuleCall | None, str | None, str | None]:
        """The call a full hook event belongs to, its input wrapper and its output wrapper."""
        number = self.full_calls.get((event.target, event.node_id))
        if number is None:
            return None, None, None
        return (self.trace.calls[number], *self.wrappers[number])

    def wrapper_of(self, tensors: tuple[int | None, ...]) -> str | None:
        for index in tensors:
            position = self.view.raw_position(index)
            if position is not None and self.view.is_identity(position[0]):
                return position[0]
        return None

    def output_wrapper(self, call: ModuleCall, wrapper_in: str | None,
                       inputs_wrapped: set[str | None], outputs_wrapped: set[str]) -> str | None:
        """The wrapper torch put on `call`'s output: a wrapper reading its first output
        tensor that no other call's input or earlier call's output is.

        A tensor can have several: a module returning a tensor it made in an earlier call (a
        cache) has it wrapped again by each call. Torch wraps a call's output as the call
        returns, so the calls (here in the order they returned) took those wrappers in the
        order they were made, each after the call's own input wrapper (made as it began)."""
        after = -1 if wrapper_in is None else self.made(wrapper_in)
        for index in call.outputs:
            position = self.view.raw_position(index)
            if position is None:
                continue
            wrappers = sorted(
                (self.made(consumer), consumer)
                for consumer, _ in self.view.raw_consumers.get(position, [])
                if self.view.is_identity(consumer) and consumer not in inputs_wrapped
                and consumer not in outputs_wrapped and self.made(consumer) > after)
            if wrappers:
                return wrappers[0][1]
        return None

    def made(self, node: str) -> int:
        made = self.view.nodes[node].made
        return -1 if made is None else made

    def why(self, event: Event) -> str | None:
        if event.hook != "backward" or event.node is None:
            return None
        who = f"{event.target}.forward" if event.target else "the model's forward"
        output = self.view.names.get((event.node_id or "", 0))
        named = f", which made {self.naming.short(_canonical(output))}" if output else ""
        call = self.call_of(event)
        returned = None if call is None else self.trace.calls[call].returns_argument
        where = (f"the last op of {who}{named}" if returned is None else
                 f"an op made before {who} ran{named}: {event.target or 'the model'} returns "
                 f"its argument {returned} as it got it")
        return (f"legacy hooks sit on the grad_fn of the module's first output: {event.node}, "
                f"{where}; grad_input follows that op's operands")

    # --- kinds of label ---------------------------------------------------------------------

    def whole(self, run: Run, raw: Position | None) -> Label:
        """All the gradient arriving at a raw position (through wrappers, if it is one)."""
        if raw is None:
            return NO_LABEL
        if (self.view.is_identity(raw[0]) and not self.view.uses(raw)
                and raw not in self.seeded[run.index]):
            # A wrapper output no op reads and the seed does not arrive at: the wrapper's
            # backward fills in zeros for it.
            return self.unused(run, raw)
        position = self.view.resolve(raw)
        if position is None:
            return NO_LABEL
        return self.describe(run, position, self.view.uses(raw)
                             if self.view.is_identity(raw[0]) else None)

    def edge(self, run: Run, node: str, number: int) -> Label:
        """What flows along one edge of a node: the node's share of its input's gradient."""
        if self.view.is_identity(node):
            if self.view.nodes[node].next[number][0] is None:
                return self.wrapper_zeros(run, node, number)
            return self.whole(run, (node, number))
        position = self.view.resolve(self.view.nodes[node].next[number])
        if position is None:
            return NO_LABEL
        if not self.view.in_real_graph(node):
            # A node the output does not depend on ran only on a wrapper's zeros: its every
            # share is zero (a backward is linear in the gradient it is given).
            return self.no_gradient(run, position)
        return self.describe(run, position, frozenset({(node, number)}))

    def accumulated(self, run: Run, leaf: str) -> Label:
        record = self.trace.named(leaf)
        label = self.whole(run, self.view.raw_position(record.index if record else None))
        if label.site is None or label.meaning is None:
            return label
        summed = self.trace.summed_runs(run.index)
        runs = tuple(earlier.index for earlier in summed)
        meaning = label.meaning
        if len(runs) > 1:
            text, latex = self.summed(summed, run, meaning, record.index if record else None)
            text = f"{self.naming.short(leaf)}.grad = {text}"
        else:
            text, latex = f"{self.naming.short(leaf)}.grad = {meaning.text}", meaning.latex
        source = None if label.source is None else replace(label.source, grad=True)
        return Label(replace(meaning, text=text, latex=latex,
                             runs=runs if len(runs) > 1 else ()), label.site, label.place,
                     source)

    def summed(self, runs: list[Run], run: Run, meaning: Meaning,
               leaf: int | None) -> tuple[str, str]:
        """What `.grad` holds after several backward calls, as text and LaTeX: each call's
        own derivative, added up (`∂a/∂x + ∂b/∂x`), the calls of one output counted once
        (`Σ of 3 backward calls' ∂b/∂x`), a call whose output does not depend on the leaf
        left out."""
        counts: dict[tuple[str, str], int] = {}
        raw = self.view.raw_position(leaf)
        for earlier in runs:
            if raw is not None and earlier is not run and raw[0] not in self.reachable[
                    earlier.index]:
                continue  # that call's output does not depend on the leaf: it added nothing
            own = meaning if earlier is run else self.whole(earlier, raw).meaning
            said = (f"∂{earlier.of}/∂?", "?") if own is None else (own.text, own.latex)
            counts[said] = counts.get(said, 0) + 1
        texts = [text if count == 1 else f"Σ of {count} backward calls' {text}"
                 for (text, _), count in counts.items()]
        latexes = [latex if count == 1 else rf"\sum_{{{count}\ \mathrm{{calls}}}} {latex}"
                   for (_, latex), count in counts.items()]
        return " + ".join(texts), " + ".join(latexes)

    def wrapper_zeros(self, run: Run, node: str, rank: int) -> Label:
        """A full hook's input wrapper passes zeros for an input that does not require grad."""
        found = self.wrapper_argument(node, rank)
        return NO_LABEL if found is None else self.zeros(run, *found)

    def wrapper_argument(self, node: str, rank: int) -> tuple[ModuleCall, int] | None:
        """The call whose input wrapper `node` is, and which argument its `rank`-th output is."""
        for number in self.input_wrapper_calls.get(node, []):
            call = self.trace.calls[number]
            tensors = [index for index, item in enumerate(call.inputs) if item is not None]
            if rank < len(tensors):
                return call, tensors[rank]
        return None

    def unused(self, run: Run, raw: Position) -> Label:
        """Zeros at a wrapper output nothing reads: for an input wrapper, an argument the
        module never uses (its full hook's grad_input entry is zeros, not None); for an output
        wrapper, an output this run's result does not depend on (torch passes None for it, or
        a stale grad_output left by an earlier backward call, which then fails its check)."""
        found = self.wrapper_argument(*raw)
        position = self.view.resolve(raw)
        if found is not None:
            return self.zeros(run, *found, unused=True, position=position)
        if position is None:
            return NO_LABEL
        names = self.view.names.get(position, [])
        wrt = self.view.tensor_name(position)
        return self.zero_label(run, wrt, names,
                               f"{run.of} does not depend on {self.naming.short(wrt)}")

    def no_gradient(self, run: Run, position: Position) -> Label:
        """Zeros at a position no real edge from the output reaches: only a full hook's
        wrapper, which fills in zeros for what got no gradient, makes torch pass one here."""
        names = self.view.names.get(position, [])
        wrt = self.view.tensor_name(position)
        short = self.naming.short(wrt)
        return self.zero_label(run, wrt, names, f"{run.of} does not depend on {short}; the "
                                                "zeros come from a full hook's wrapper")

    def zeros(self, run: Run, call: ModuleCall, index: int, unused: bool = False,
              position: Position | None = None) -> Label:
        """Zeros for the module's `index`-th argument: one that does not require grad, or
        (`unused`) one the module's forward never uses. Named as the tensor at its real
        `position` is, if it has one (the leaf `x`, not a wrapper's view of it), then as the
        caller and the module know it."""
        names: list[str] = list(self.view.names.get(position, [])) if position else []
        for tensors in (call.arguments, call.inputs):
            record = self.view.record(tensors[index] if index < len(tensors) else None)
            names += record.names if record else ()
        if not names:
            names = self.caller_names(call.arguments[index] if index < len(call.arguments)
                                      else None)
        wrt = _canonical(names) if names else f"{call.module or 'model'} input {index}"
        short = self.naming.short(wrt)
        why = (f"no op in {call.module or 'the model'} uses {short}" if unused
               else f"{short} does not require grad")
        return self.zero_label(run, wrt, names, why)

    def caller_names(self, tensor: int | None) -> list[str]:
        """The names of the tensor a full hook's wrapper made `tensor` from, outward: an
        enclosing module's full hooks hand its forward a new tensor for each argument, one
        that does not require grad too (`y` given to the model reaches `m` as such a copy)."""
        seen: set[int] = set()
        while tensor is not None and tensor not in seen:
            seen.add(tensor)
            tensor = self.unwrapped.get(tensor)
            record = self.view.record(tensor)
            if record is not None and record.names:
                return list(record.names)
        return []

    def zero_label(self, run: Run, wrt: str, names: list[str], why: str) -> Label:
        """`∂of/∂wrt = 0 (why)`, checked against zeros."""
        short, latex = self.naming.short(wrt), self.naming.latex
        meaning = Meaning(run.of, wrt, _aliases(names, wrt), "as-is",
                          f"∂{run.of}/∂{short} = 0 ({why})",
                          rf"\frac{{\partial {latex(run.of)}}}{{\partial {latex(short)}}} = 0",
                          kind="zero")
        return Label(meaning, Site(run.index))

    def describe(self, run: Run, position: Position, edges: frozenset[Edge] | None) -> Label:
        """Name the tensor at `position`, through views if it has no name of its own (once per
        call, place and argument shape: a gradient is handed to several hooks)."""
        key = (run.index, position, edges, self.arg_shape)
        found = self.described.get(key)
        if found is None:
            found = self.described[key] = self.described_now(run, position, edges)
        return found

    def described_now(self, run: Run, position: Position,
                      edges: frozenset[Edge] | None) -> Label:
        if not self.view.in_real_graph(position[0]):
            return self.no_gradient(run, position)
        if edges is not None and edges >= self.consumers(position, run):
            edges = None
        start, start_edges = position, edges
        transposes, reshaped, expand = 0, False, None
        direction = ""
        for _ in range(16):
            if self.view.names.get(position) or edges is not None:
                break
            node = self.view.nodes[position[0]]
            kind = VIEWS.get(node.name)
            below = self.view.resolve(node.next[0] if node.next else None)
            if kind is not None and below is not None and direction != "up":
                if kind == "transpose" and self.flat(below):
                    # `t()` of a vector or a number gives it back as it is: no view at all.
                    position = below
                    edges = self.only_through(node.id, below, run)
                    continue
                if kind == "expand" and direction == "down":
                    # An expand under other views (`matmul` expands each operand to the batch
                    # shape, then folds the batch into one dim): to the tensor's own size it is
                    # no view at all, or a reshape where it adds dims of size 1 (`(4,)` to
                    # `(1, 4)`); a broadcast under a reshape no one layout word says.
                    if not self.unexpanded(below):
                        break
                    if self.shape(position) != self.shape(below):
                        if _mixed("reshape", transposes, reshaped):
                            break
                        reshaped = True
                    position = below
                    edges = self.only_through(node.id, below, run)
                    continue
                if kind == "expand":
                    expand = node.id
                    position = below
                    break
                if _mixed(kind, transposes, reshaped):
                    break
                direction = "down"
                transposes += kind == "transpose"
                reshaped |= kind == "reshape"
                position = below
                edges = self.only_through(node.id, below, run)
                continue
            users = self.consumers(position, run)
            if len(users) == 1 and direction != "down":
                (user, _), = users
                user_kind = VIEWS.get(self.view.name_of(user))
                if user_kind == "transpose" and self.flat(position):
                    user_kind = "identity"  # `t()` of a vector: the vector itself
                if user_kind == "identity":
                    direction = "up"
                    position = (user, 0)
                    continue
                if user_kind in ("transpose", "reshape") and not _mixed(
                        user_kind, transposes, reshaped):
                    direction = "up"
                    transposes += user_kind == "transpose"
                    reshaped |= user_kind == "reshape"
                    position = (user, 0)
                    continue
            break
        if not self.view.names.get(position) and expand is None:
            # Views lead to no named tensor: the tensor is named by its own op, as the chain
            # rule names it, not by another unnamed tensor it is a view of.
            position, edges, transposes, reshaped = start, start_edges, 0, False
        label = self.meaning(run, position, edges, transposes, reshaped, expand)
        return replace(label, source=self.source(run, start, start_edges))

    def only_through(self, view: str, below: Position, run: Run) -> frozenset[Edge] | None:
        """The edge of the view `view` into the tensor at `below`, where that tensor has other
        uses too (what comes through the view is then only its share); None where the view is
        its only use (its whole gradient)."""
        share = frozenset({(view, 0)})
        return share if share < self.consumers(below, run) else None

    def unexpanded(self, position: Position) -> bool:
        """Whether the tensor at `position` has as many elements as the argument being
        labelled, which views of it reach: an expand between them then broadcast nothing."""
        shape = self.shape(position)
        return shape is not None and math.prod(shape) == math.prod(self.arg_shape)

    def flat(self, position: Position) -> bool:
        """Whether the tensor at `position` has fewer than two dims (its `t()` is itself)."""
        shape = self.shape(position)
        return shape is not None and len(shape) < 2

    def shape(self, position: Position) -> tuple[int, ...] | None:
        """The shape of the tensor at `position` as the ops after it read it: the graph's (a
        later in-place `squeeze_` changes the tensor's, not what its views saw), else its
        record's (None: neither recorded it)."""
        shape = self.view.shape_at(position)
        if shape is not None:
            return shape
        names = self.view.names.get(position)
        record = self.trace.named(names[0]) if names else None
        return None if record is None else tuple(record.shape)

    def source(self, run: Run, position: Position, edges: frozenset[Edge] | None) -> Source:
        rank = self.view.rank
        return Source(run.index, (rank[position[0]], position[1]),
                      None if edges is None else tuple(sorted(
                          (rank[node], number) for node, number in edges)))

    def meaning(self, run: Run, position: Position, edges: frozenset[Edge] | None,
                transposes: int, reshaped: bool, expand: str | None) -> Label:
        """The claim for the gradient at `position` (only along `edges`, if given), seen
        through the views the describing walked, and its text, rendered from the claim."""
        names = self.view.names.get(position, [])
        wrt = self.view.tensor_name(position)
        layout: Layout = ("summed" if expand else "reshaped" if reshaped
                          else "transposed" if transposes % 2 else "as-is")
        via = self.uses(position, edges, run)
        summed_dims: tuple[int, ...] = ()
        if expand is not None:
            # The value is the gradient of wrt expanded: "only the part via" that expand when
            # wrt has other uses too.
            share = frozenset({(expand, 0)})
            restricted = share < self.consumers(position, run)
            via = (Use(self.output_name(expand)),) if restricted else ()
            expanded = self.view.shape_at((expand, 0))
            summed_dims = _broadcast_dims(self.shape(position),
                                          self.arg_shape if expanded is None else expanded)
        text, latex, partial = claim_text(run.of, wrt, layout, via, summed_dims, self.naming,
                                          run.seed is not None)
        meaning = Meaning(run.of, wrt, _aliases(names, wrt), layout, text, latex, partial,
                          via=via, summed_dims=summed_dims)
        return Label(meaning, Site(run.index), (self.view.rank[position[0]], position[1]))

    def uses(self, position: Position, edges: frozenset[Edge] | None,
             run: Run) -> tuple[Use, ...]:
        """The uses `edges` are of the tensor at `position`: one per op, narrowed to operands
        where the op reads the tensor more often than the edges say."""
        if edges is None:
            return ()
        every = self.reads_by_consumer(position, run)
        found: list[Use] = []
        for node in sorted({node for node, _ in edges}, key=lambda item: self.view.rank[item]):
            claimed = sorted(number for user, number in edges if user == node)
            reads = sorted(set(every.get(node, ())) | set(claimed))
            name = self.output_name(node)
            if claimed == reads:
                found.append(Use(name))
            else:
                found.extend(Use(name, number) for number in claimed)
        return tuple(found)

    def consumers(self, position: Position, run: Run) -> frozenset[Edge]:
        """The edges reading the tensor at `position` that `run` reaches (computed once)."""
        key = (position, run.index)
        found = self.within.get(key)
        if found is None:
            found = self.view.consumers_within(position, self.reachable.get(run.index, set()))
            self.within[key] = found
        return found

    def reads_by_consumer(self, position: Position, run: Run) -> dict[str, list[int]]:
        """`consumers`, as each consuming node's input numbers (computed once)."""
        key = (position, run.index)
        found = self.reads.get(key)
        if found is None:
            found = {}
            for node, number in self.consumers(position, run):
                found.setdefault(node, []).append(number)
            self.reads[key] = found
        return found

    def output_name(self, node: str) -> str:
        return self.view.tensor_name((node, 0))


def _mixed(kind: str, transposes: int, reshaped: bool) -> bool:
    """Whether one more view of `kind` would make a transpose and a reshape together: a value
    no one layout word says (a transpose of a reshape is no reshape of the tensor), so the
    labeller stops before it and the tensor is named by its own op."""
    return (kind == "transpose" and reshaped) or (kind == "reshape" and transposes % 2 == 1)


def _broadcast_dims(small: tuple[int, ...] | None, large: tuple[int, ...]) -> tuple[int, ...]:
    """The dims of `large` that expanding `small` to it broadcast along."""
    if small is None:
        return ()
    extra = len(large) - len(small)
    return tuple(dim for dim in range(len(large))
                 if dim < extra or (small[dim - extra] == 1 and large[dim] != 1))


@cache
def _split(arg_name: str) -> tuple[str, int]:
    """`grad_input[2]` -> ("grad_input", 2): a few names, asked for at every argument."""
    match = re.fullmatch(r"(\w+)\[(\d+)\]", arg_name)
    return (match.group(1), int(match.group(2))) if match else (arg_name, 0)


def _tensor_rank(items: tuple[int | None, ...], index: int) -> int:
    """Which wrapper output a module argument is: wrappers hold only the tensor arguments."""
    return sum(1 for item in items[:index] if item is not None)


def _canonical(names: list[str]) -> str:
    found = canonical_name(names)
    assert found is not None, "called for named tensors only"
    return found


def _aliases(names: list[str], canonical: str) -> tuple[str, ...]:
    return tuple(sorted({name for name in names if name != canonical}))


__all__ = ["EventLabels", "Label", "Site", "Source", "label_pass"]
