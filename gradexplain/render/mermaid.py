"""Mermaid flowcharts for the markdown report: the spec's forward graph and the legacy pass's
autograd graph, with the nodes legacy module hooks sit on marked.

This module owns the diagram bodies only (from `flowchart ...` on); the caller wraps them in
```mermaid fences and writes a sentence instead when a function returns None (a graph too large
to read or for GitHub to render, or an empty one). Pure functions of a Session: no torch, no
printing, and the same session always gives the same bytes (node ids are counters in the order
the data lists things, never anything hashed or addressed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gradexplain.records.graph import GraphView, Position
from gradexplain.records.names import ACCUMULATE, canonical_name
from gradexplain.records.paths import inside, module_title
from gradexplain.records.session import ForwardStep, Session
from gradexplain.records.trace import PassTrace, TensorRecord

# Past this many nodes a flowchart is a hairball, and GitHub's renderer gets slow or gives up.
MAX_NODES = 150

HOOK_CLASS = "legacyhook"
HOOK_STYLE = "fill:#fff3bf,stroke:#e8590c,stroke-width:3px"
TORCH_PREFIX = "torch::autograd::"
BREAK = "<br/>"
# A forward whose longest chain of steps is longer than this is drawn top-down: left-to-right,
# GitHub scales a long chain down to the page's width until its labels are a few pixels high.
LONG_CHAIN = 4

# Mermaid decodes `#name;` / `#code;` inside labels. A user's '#' is encoded too (it could start
# one), '"' would end the label, '<' '>' would be read as HTML, a backtick would open a markdown
# string, and a line break would end the statement. One pass per character, so nothing is
# encoded twice.
_ENTITIES = {
    "#": "#35;",
    '"': "#quot;",
    "<": "#lt;",
    ">": "#gt;",
    "&": "#amp;",
    "`": "#96;",
    "\n": " ",
    "\r": " ",
}


def escape(text: str) -> str:
    """Text made safe for the inside of a double-quoted mermaid label."""
    return "".join(_ENTITIES.get(char, char) for char in text)


def _label(*lines: str) -> str:
    """Escaped lines joined with mermaid's line break (the only raw markup a label holds)."""
    return BREAK.join(escape(line) for line in lines)


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(size) for size in shape) + "]"


def _relative(name: str, path: str) -> str:
    """A name as it reads inside the subgraph of module `path` (`module2.l.weight` -> l.weight)."""
    if path and inside(name, path):
        return name[len(path) + 1:]
    return name


# --- forward --------------------------------------------------------------------------------


@dataclass
class _Tensor:
    key: str  # canonical name: what makes two spellings one node
    record: TensorRecord | None
    kind: Literal["input", "param", "tensor"] = "tensor"
    path: str | None = None  # the subgraph it is drawn in ("" = outside all of them)
    node_id: str = ""


@dataclass
class _Forward:
    """The forward's tensors, gathered first so that each one's kind and subgraph are settled
    before any node is written."""

    trace: PassTrace | None
    tensors: dict[str, _Tensor] = field(default_factory=dict)
    made: set[str] = field(default_factory=set)
    modules: list[str] = field(default_factory=list)

    def record(self, name: str) -> TensorRecord | None:
        return None if self.trace is None else self.trace.named(name)

    def key(self, name: str) -> str:
        """The tensor's canonical name, so `module2.x` and `y` meet in one node."""
        record = self.record(name)
        if record is None:
            return name
        return canonical_name(record.names) or name

    def tensor(self, name: str) -> _Tensor:
        key = self.key(name)
        if key not in self.tensors:
            self.tensors[key] = _Tensor(key, self.record(name))
        return self.tensors[key]

    def layer_params(self, step: ForwardStep) -> list[_Tensor]:
        """A built-in layer's own parameters (a Linear's weight): no step reads them by name, yet
        they are leaves of the graph just as a module's `params` are."""
        if step.calls is None or step.calls in self.modules or self.trace is None:
            return []
        prefix = step.calls + "."
        found: list[_Tensor] = []
        for record in self.trace.tensors:
            if record.is_leaf and any(name.startswith(prefix) for name in record.names):
                name = next(name for name in record.names if name.startswith(prefix))
                found.append(self.tensor(name))
        return found


def forward_mermaid(session: Session) -> str | None:
    """The spec's forward as a flowchart: inputs (stadiums), parameters (cylinders), one box per
    step and one rounded node per tensor a step makes, each module's steps in a subgraph named
    by its path, and a built-in layer's call with its parameters in a subgraph of the layer's
    own (so the layout keeps them together). Left to right, or top-down when the longest chain
    of steps is over LONG_CHAIN (it would be too wide to read). None when it is empty or over
    MAX_NODES nodes."""
    if not session.forward:
        return None
    graph = _Forward(session.trace("legacy"))
    for step in session.forward:
        for path in _prefixes(step.module):
            if path not in graph.modules:
                graph.modules.append(path)
    inputs = {graph.key(name) for name in session.inputs}
    for step in session.forward:
        for name in step.targets:
            graph.made.add(graph.tensor(name).key)

    # Where each node is drawn: a step's targets beside the first step that makes them, other
    # tensors beside the first step that reads them; the model's inputs outside every module.
    reads: list[tuple[ForwardStep, list[_Tensor], list[_Tensor]]] = []
    for step in session.forward:
        operands = [graph.tensor(name) for name in step.operands]
        params = graph.layer_params(step)
        targets = [graph.tensor(name) for name in step.targets]
        reads.append((step, operands + [p for p in params if p not in operands], targets))
        for tensor in targets:
            if tensor.path is None:
                tensor.path = step.module
        for tensor in operands + params:
            if tensor.key in graph.made:
                continue
            record = tensor.record
            if tensor.key in inputs:
                tensor.kind, tensor.path = "input", ""
            elif record is None or record.is_leaf:
                tensor.kind = "param"
            # A non-leaf nobody's step makes (an argument computed inline, `inner(h * b)`) stays
            # a plain tensor: calling it a parameter would be wrong.
            if tensor.path is None:
                tensor.path = _layer(step, params) if tensor in params else step.module

    if len(graph.tensors) + len(session.forward) > MAX_NODES:
        return None

    # Ids count in the order nodes are written, one counter per kind of node.
    counters = {"input": 0, "param": 0, "tensor": 0}
    prefixes = {"input": "i", "param": "p", "tensor": "t"}

    def number(tensor: _Tensor) -> None:
        tensor.node_id = f"{prefixes[tensor.kind]}{counters[tensor.kind]}"
        counters[tensor.kind] += 1

    layers = [path for step, sources, _ in reads
              if (path := _layer(step, sources)) != step.module]
    members: dict[str, list[str]] = {path: [] for path in ["", *graph.modules, *layers]}
    inputs_lines: list[str] = []
    for tensor in graph.tensors.values():
        if tensor.kind == "input":
            number(tensor)
            inputs_lines.append(_forward_tensor_node(tensor, ""))
    edges: list[str] = []
    for index, (step, sources, targets) in enumerate(reads):
        op_id = f"s{index}"
        for tensor in sources + targets:
            # Defined once, in its own subgraph: mermaid moves a node mentioned in two subgraphs.
            if not tensor.node_id:
                number(tensor)
                path = tensor.path or ""
                members[path].append(_forward_tensor_node(tensor, path))
        members[_layer(step, sources)].append(_step_node(op_id, step, graph.modules))
        edges += [f"{tensor.node_id} --> {op_id}" for tensor in sources]
        edges += [f"{op_id} --> {tensor.node_id}" for tensor in targets]

    # Inputs first and the model's own steps last, the order the data flows in; edges after all
    # definitions, so no edge can pull a node into a subgraph.
    direction = "TD" if _longest_chain(reads) > LONG_CHAIN else "LR"
    lines = [f"flowchart {direction}", *("  " + line for line in inputs_lines)]
    lines += _subgraphs([*graph.modules, *layers], members)
    lines += ["  " + line for line in members[""]]
    lines += ["  " + edge for edge in edges]
    return "\n".join(lines)


def _forward_tensor_node(tensor: _Tensor, path: str) -> str:
    text = _relative(tensor.key, path)
    if tensor.record is not None:
        text += " " + _shape(tensor.record.shape)
    label = _label(text)
    node_id = tensor.node_id
    if tensor.kind == "input":
        return f'{node_id}(["{label}"])'
    if tensor.kind == "param":
        return f'{node_id}[("{label}")]'
    return f'{node_id}("{label}")'


def _step_node(op_id: str, step: ForwardStep, modules: list[str]) -> str:
    """A step's box; a call of a module is a subroutine box, since its own steps are drawn
    again in that module's subgraph. The step's text names what it calls by its local name
    (`conv1(x)`), and the subgraph around it (or the module's) gives the path: no second line."""
    label = _label(step.text)
    if step.calls is not None and step.calls in modules:
        return f'{op_id}[["{label}"]]'
    return f'{op_id}["{label}"]'


def _layer(step: ForwardStep, sources: list[_Tensor]) -> str:
    """The subgraph a step is drawn in: its built-in layer's own when it calls one that has
    parameters (drawn beside it) and sits in the step's module; else the step's module."""
    calls = step.calls
    if calls is None or _parent(calls) != step.module:
        return step.module
    if not any(tensor.kind == "param" and tensor.path in (None, calls) for tensor in sources):
        return step.module
    return calls


def _longest_chain(reads: list[tuple[ForwardStep, list[_Tensor], list[_Tensor]]]) -> int:
    """How many steps the longest path through the forward passes (steps come in the order
    they run, so each step's operands are made before it)."""
    depth: dict[str, int] = {}
    longest = 0
    for _, sources, targets in reads:
        here = 1 + max((depth.get(tensor.key, 0) for tensor in sources), default=0)
        for tensor in targets:
            depth[tensor.key] = max(depth.get(tensor.key, 0), here)
        longest = max(longest, here)
    return longest


def _prefixes(path: str) -> list[str]:
    """A module path and its ancestors, outermost first (`a.b` -> a, a.b); none for the model."""
    if not path:
        return []
    parts = path.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts) + 1)]


def _subgraphs(modules: list[str], members: dict[str, list[str]]) -> list[str]:
    """Nested subgraphs, each module inside its parent's, in the order the modules first came."""
    ids = {path: f"g{number}" for number, path in enumerate(modules)}
    lines: list[str] = []

    def emit(path: str, depth: int) -> None:
        indent = "  " * depth
        lines.append(f'{indent}subgraph {ids[path]} ["{_label(path)}"]')
        lines.extend(f"{indent}  {line}" for line in members[path])
        for child in modules:
            if _parent(child) == path:
                emit(child, depth + 1)
        lines.append(f"{indent}end")

    for path in modules:
        if _parent(path) == "":
            emit(path, 1)
    return lines


def _parent(path: str) -> str:
    return path.rpartition(".")[0]


# --- autograd -------------------------------------------------------------------------------


def autograd_mermaid(session: Session) -> str | None:
    """The legacy pass's autograd graph, root at the top and arrows the way gradients flow (from
    each node to its next_functions, down to the AccumulateGrad leaves). Each node shows its type,
    the named tensor it is the grad_fn of (or the leaf it accumulates into), the runs it is the
    root of, and the legacy module hooks that sit on it (highlighted). None when it is empty or
    over MAX_NODES nodes."""
    trace = session.trace("legacy")
    if trace is None or not trace.graph:
        return None
    view = GraphView(trace)
    # Roots first, breadth first; then anything no run reaches, so nothing recorded goes missing.
    order = list(view.order)
    order += [node.id for node in trace.graph
              if not view.is_identity(node.id) and node.id not in view.rank]
    if not order or len(order) > MAX_NODES:
        return None
    ids = {node: f"n{number}" for number, node in enumerate(order)}

    outputs = _outputs(view, trace)
    roots: dict[str, list[int]] = {}
    for run in trace.runs:
        position = view.resolve(view.raw_position(run.root))
        if position is not None:
            roots.setdefault(position[0], []).append(run.index)
    hooks = _legacy_hooks(session, view, trace)

    lines = ["flowchart TD"]
    for node_id in order:
        node = view.nodes[node_id]
        text = [node.name.removeprefix(TORCH_PREFIX)]
        if node.name == ACCUMULATE:
            text += _leaf_lines(trace, node.variable, outputs.get((node_id, 0)))
        else:
            for (owner, number), (name, size) in outputs.items():
                if owner == node_id:
                    suffix = f" (output {number})" if number else ""
                    text.append(f"grad_fn of {name} {_shape(size)}{suffix}")
        if node_id in roots:
            runs = roots[node_id]
            text.append(("root of run " if len(runs) == 1 else "root of runs ")
                        + ", ".join(str(run) for run in runs))
        if node_id in hooks:
            text.append("legacy hook: " + ", ".join(hooks[node_id]))
        opening, closing = ('(["', '"])') if node.name == ACCUMULATE else ('["', '"]')
        lines.append(f"  {ids[node_id]}{opening}{_label(*text)}{closing}")
    for node_id in order:
        node = view.nodes[node_id]
        for number, edge in enumerate(node.next):
            real = view.resolve(edge)
            if real is None or real[0] not in ids:
                continue
            # grad_input[i] of a hook on this node is edge i: number the edges when there is a
            # choice, so the hook's arguments can be matched to the arrows.
            arrow = f'-->|"{number}"|' if len(node.next) > 1 else "-->"
            lines.append(f"  {ids[node_id]} {arrow} {ids[real[0]]}")
    marked = [ids[node_id] for node_id in order if node_id in hooks]
    if marked:
        lines.append(f"  classDef {HOOK_CLASS} {HOOK_STYLE}")
        lines.append(f"  class {','.join(marked)} {HOOK_CLASS}")
    return "\n".join(lines)


def _outputs(view: GraphView, trace: PassTrace) -> dict[Position, tuple[str, tuple[int, ...]]]:
    """Each named position's canonical name and shape, in output order per node. The names are
    GraphView's (a tensor reached through identity wrappers counts for the real node below
    them); the shape is that of the first named tensor there."""
    shapes: dict[Position, tuple[int, ...]] = {}
    for record in trace.tensors:
        position = view.resolve(view.raw_position(record.index))
        if position is not None and record.names:
            shapes.setdefault(position, record.shape)
    found: dict[Position, tuple[str, tuple[int, ...]]] = {}
    for position in sorted(view.names):
        name = canonical_name(view.names[position])
        if name is not None:
            found[position] = (name, shapes[position])
    return found


def _leaf_lines(trace: PassTrace, variable: int | None,
                fallback: tuple[str, tuple[int, ...]] | None) -> list[str]:
    if variable is not None and 0 <= variable < len(trace.tensors):
        record = trace.tensors[variable]
        name = canonical_name(record.names)
        if name is not None:
            return [f"leaf {name} {_shape(record.shape)}"]
    if fallback is not None:
        return [f"leaf {fallback[0]} {_shape(fallback[1])}"]
    return []


def _legacy_hooks(session: Session, view: GraphView, trace: PassTrace) -> dict[str, list[str]]:
    """Which modules' legacy backward hooks ran on each real node, outermost module first. The
    walk says which events were legacy module hooks; the trace's event of the same seq says
    which graph node each ran on."""
    node_of = {event.seq: event.node_id for event in trace.events}
    targets: dict[str, list[str]] = {}
    for walk_pass in session.walk.passes:
        if walk_pass.mode != "legacy":
            continue
        for event in walk_pass.events:
            node_id = node_of.get(event.seq)
            if event.hook != "backward" or node_id is None or node_id not in view.nodes:
                continue
            real = view.resolve((node_id, 0))
            if real is None:
                continue
            found = targets.setdefault(real[0], [])
            if event.target not in found:
                found.append(event.target)
    return {node: [module_title(target) for target in sorted(found)]
            for node, found in targets.items()}


__all__ = ["LONG_CHAIN", "MAX_NODES", "autograd_mermaid", "escape", "forward_mermaid"]
