"""The mermaid diagrams of the markdown report: valid flowcharts for every spec (checked by a small
validator of the subset the renderer emits), the autograd graph against torch's own, the legacy
hook marks against where torch puts legacy hooks, and the same bytes for the same session."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from gradexplain.records.session import Session, load_session, save_session
from gradexplain.render.mermaid import MAX_NODES, autograd_mermaid, escape, forward_mermaid
from tests.helpers.articles import TwoModules
from tests.helpers.capture import capture_text, captured
from tests.helpers.cli import SPECS
from tests.helpers.spectexts import NESTED

# --- a validator of the flowchart subset the renderer emits ----------------------------------

IDENT = r"[A-Za-z][A-Za-z0-9_]*"
# Opening bracket -> (closing bracket, shape name).
SHAPES = {"[[": ("]]", "subroutine"), "([": ("])", "stadium"), "[(": (")]", "cylinder"),
          "[": ("]", "box"), "(": (")", "rounded")}
NODE = re.compile(rf'^(?P<id>{IDENT})(?P<open>\[\[|\(\[|\[\(|\[|\()"(?P<label>[^"]*)"'
                  r"(?P<close>\]\]|\]\)|\)\]|\]|\))$")
EDGE = re.compile(rf'^(?P<a>{IDENT}) -->(?:\|"(?P<label>[^"]*)"\|)? (?P<b>{IDENT})$')
SUBGRAPH = re.compile(rf'^subgraph (?P<id>{IDENT}) \["(?P<title>[^"]*)"\]$')
CLASSDEF = re.compile(r"^classDef (?P<name>\w+) [\w:#,.%\-]+$")
CLASS = re.compile(rf"^class (?P<ids>{IDENT}(?:,{IDENT})*) (?P<name>\w+)$")
KEYWORDS = {"end", "subgraph", "graph", "flowchart", "class", "classDef", "style", "click",
            "linkStyle", "direction"}
ENTITY = re.compile(r"#(?:[a-z]+|\d+);")


class MermaidError(ValueError):
    pass


@dataclass
class Node:
    shape: str
    lines: list[str]  # the label's lines, entities decoded
    subgraph: str  # the title of the innermost enclosing subgraph, "" for none


@dataclass
class Diagram:
    direction: str
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[tuple[str, str, str | None]] = field(default_factory=list)
    subgraphs: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (title, parent)
    classes: dict[str, list[str]] = field(default_factory=dict)  # class name -> node ids

    def types(self) -> dict[str, str]:
        return {node_id: node.lines[0] for node_id, node in self.nodes.items()}

    def with_label(self, first_line: str) -> list[str]:
        return [node_id for node_id, node in self.nodes.items() if node.lines[0] == first_line]


def decode(text: str) -> str:
    """A label's text as a reader sees it: the entity codes mermaid decodes, decoded."""
    named = {"quot": '"', "lt": "<", "gt": ">", "amp": "&"}

    def one(match: re.Match[str]) -> str:
        code = match.group(0)[1:-1]
        return chr(int(code)) if code.isdigit() else named[code]

    return ENTITY.sub(one, text)


def check_label(text: str, line: int) -> list[str]:
    if '"' in text:
        raise MermaidError(f"line {line}: raw quote in label {text!r}")
    lines = text.split("<br/>")
    for part in lines:
        if "<" in part or ">" in part:
            raise MermaidError(f"line {line}: raw < or > in label {text!r}")
        if "`" in part:
            raise MermaidError(f"line {line}: backtick in label {text!r}")
        if "#" in ENTITY.sub("", part):
            raise MermaidError(f"line {line}: '#' outside an entity code in {text!r}")
    if not text.strip():
        raise MermaidError(f"line {line}: empty label")
    return [decode(part) for part in lines]


def parse_flowchart(text: str) -> Diagram:
    """Parse the subset, or raise MermaidError saying what is wrong."""
    rows = text.split("\n")
    header = re.fullmatch(r"flowchart (LR|TD|BT)", rows[0])
    if header is None:
        raise MermaidError(f"line 1: not a flowchart header: {rows[0]!r}")
    diagram = Diagram(header.group(1))
    stack: list[str] = []
    used: list[tuple[int, str]] = []
    class_uses: list[tuple[int, str, list[str]]] = []
    for number, row in enumerate(rows[1:], start=2):
        line = row.strip()
        if not line or row != row.rstrip():
            raise MermaidError(f"line {number}: empty or trailing blank")
        if line.count('"') % 2:
            raise MermaidError(f"line {number}: unbalanced quotes")
        if line == "end":
            if not stack:
                raise MermaidError(f"line {number}: `end` without a subgraph")
            stack.pop()
        elif match := SUBGRAPH.fullmatch(line):
            identifier = match.group("id")
            if identifier in diagram.nodes or identifier in diagram.subgraphs:
                raise MermaidError(f"line {number}: id {identifier} defined twice")
            title = check_label(match.group("title"), number)[0]
            parent = diagram.subgraphs[stack[-1]][0] if stack else ""
            diagram.subgraphs[identifier] = (title, parent)
            stack.append(identifier)
        elif match := NODE.fullmatch(line):
            identifier = match.group("id")
            closing, shape = SHAPES[match.group("open")]
            if match.group("close") != closing:
                raise MermaidError(f"line {number}: {match.group('open')} closed by "
                                   f"{match.group('close')}")
            if identifier in KEYWORDS:
                raise MermaidError(f"line {number}: keyword {identifier} as a node id")
            if identifier in diagram.nodes or identifier in diagram.subgraphs:
                raise MermaidError(f"line {number}: id {identifier} defined twice")
            title = diagram.subgraphs[stack[-1]][0] if stack else ""
            diagram.nodes[identifier] = Node(shape, check_label(match.group("label"), number),
                                             title)
        elif match := EDGE.fullmatch(line):
            label = match.group("label")
            if label is not None:
                label = check_label(label, number)[0]
            diagram.edges.append((match.group("a"), match.group("b"), label))
            used += [(number, match.group("a")), (number, match.group("b"))]
        elif match := CLASSDEF.fullmatch(line):
            diagram.classes.setdefault(match.group("name"), [])
        elif match := CLASS.fullmatch(line):
            class_uses.append((number, match.group("name"), match.group("ids").split(",")))
        else:
            raise MermaidError(f"line {number}: not in the subset: {line!r}")
    if stack:
        raise MermaidError(f"{len(stack)} subgraph(s) never closed")
    for number, identifier in used:
        if identifier not in diagram.nodes:
            raise MermaidError(f"line {number}: edge to undefined node {identifier}")
    for number, name, identifiers in class_uses:
        if name not in diagram.classes:
            raise MermaidError(f"line {number}: class {name} has no classDef")
        for identifier in identifiers:
            if identifier not in diagram.nodes:
                raise MermaidError(f"line {number}: class on undefined node {identifier}")
        diagram.classes[name] += identifiers
    return diagram


GOOD = """flowchart LR
  i0(["x []"])
  subgraph g0 ["module"]
    p0[("p [2]")]
    s0["y = p * x<br/>a #quot;b#quot; #lt;c#gt;"]
  end
  i0 --> s0
  p0 -->|"1"| s0
  classDef mark fill:#fff,stroke:#e8590c,stroke-width:3px
  class s0 mark"""

BROKEN = {
    "no header": GOOD.replace("flowchart LR", "graph LR"),
    "raw quote in a label": GOOD.replace("#quot;b#quot;", '"b"'),
    "raw < in a label": GOOD.replace("#lt;c#gt;", "<c>"),
    "stray #": GOOD.replace("#lt;c", "#c"),
    "edge to an undefined node": GOOD.replace("i0 --> s0", "i0 --> s9"),
    "unbalanced subgraph": GOOD.replace("  end\n", ""),
    "end without subgraph": GOOD + "\n  end",
    "mismatched brackets": GOOD.replace('p0[("p [2]")]', 'p0[("p [2]"])'),
    "node defined twice": GOOD.replace('  end\n', '    i0["again"]\n  end\n'),
    "class without classDef": GOOD.replace("class s0 mark", "class s0 other"),
    "unquoted label": GOOD.replace('i0(["x []"])', "i0(x)"),
}


def test_the_validator_accepts_the_subset() -> None:
    diagram = parse_flowchart(GOOD)
    assert diagram.direction == "LR"
    assert diagram.nodes["s0"] == Node("box", ["y = p * x", 'a "b" <c>'], "module")
    assert diagram.nodes["i0"].shape == "stadium"
    assert diagram.nodes["p0"].shape == "cylinder"
    assert diagram.edges == [("i0", "s0", None), ("p0", "s0", "1")]
    assert diagram.subgraphs == {"g0": ("module", "")}
    assert diagram.classes == {"mark": ["s0"]}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_the_validator_rejects_broken_diagrams(broken: str) -> None:
    with pytest.raises(MermaidError):
        parse_flowchart(BROKEN[broken])


def test_escape_leaves_nothing_mermaid_reads_as_syntax() -> None:
    nasty = 'a "quoted" <tag> & #35; `tick`\nnext'
    label = escape(nasty)
    assert check_label(label, 1) == [nasty.replace("\n", " ")]


# --- every spec --------------------------------------------------------------------------------

SPEC_FILES = sorted(SPECS.glob("*.yaml"))


@pytest.mark.parametrize("path", SPEC_FILES, ids=[path.stem for path in SPEC_FILES])
def test_both_diagrams_of_every_spec_are_valid(path: Path) -> None:
    session = captured(path.name)
    forward, autograd = forward_mermaid(session), autograd_mermaid(session)
    assert forward is not None and autograd is not None
    steps = parse_flowchart(forward)
    assert steps.direction in ("LR", "TD")  # test_mermaid_layout.py says which
    # One box per step, with an arrow to each tensor it makes.
    boxes = Counter((node.lines[0], sum(1 for a, _, _ in steps.edges if a == node_id))
                    for node_id, node in steps.nodes.items()
                    if node.shape in ("box", "subroutine"))
    assert boxes == Counter((step.text, len(step.targets)) for step in session.forward)
    graph = parse_flowchart(autograd)
    assert graph.direction == "TD"
    trace = session.trace("legacy")
    assert trace is not None
    real = [node for node in trace.graph if node.name != "BackwardHookFunctionBackward"]
    assert sorted(graph.types().values()) == sorted(
        node.name.removeprefix("torch::autograd::") for node in real)
    assert len(graph.edges) == sum(1 for node in real for child, _ in node.next if child)
    assert graph.classes.get("legacyhook"), "every spec has a legacy hook on some node"


# --- torch is the oracle for the autograd graph and where legacy hooks sit --------------------


def two_modules_in_torch() -> tuple[TwoModules, torch.Tensor, dict[str, str]]:
    """The spec's model in plain torch, and the grad_fn each module's output has: the node
    `register_backward_hook` puts its hook on."""
    model = TwoModules()
    hooked: dict[str, str] = {}

    def record(name: str) -> Any:
        def hook(module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
            assert output.grad_fn is not None
            hooked[name] = output.grad_fn.name().removeprefix("torch::autograd::")
        return hook

    for name, module in model.named_modules():
        module.register_forward_hook(record(name))
    x = torch.tensor(5.0, requires_grad=True)
    return model, model(x), hooked


def torch_graph(root: Any) -> tuple[Counter[str], Counter[tuple[str, str]]]:
    """Node types and (node type, next node type) edges reachable from `root`."""
    types: Counter[str] = Counter()
    edges: Counter[tuple[str, str]] = Counter()
    seen: set[Any] = set()
    queue = [root]
    while queue:
        node = queue.pop(0)
        if node in seen:
            continue
        seen.add(node)
        name = node.name().removeprefix("torch::autograd::")
        types[name] += 1
        for child, _ in node.next_functions:
            if child is not None:
                edges[(name, child.name().removeprefix("torch::autograd::"))] += 1
                queue.append(child)
    return types, edges


def test_the_autograd_graph_is_torchs() -> None:
    _, z, _ = two_modules_in_torch()
    types, edges = torch_graph(z.grad_fn)
    text = autograd_mermaid(captured("two_modules.yaml"))
    assert text is not None
    diagram = parse_flowchart(text)
    names = diagram.types()
    assert Counter(names.values()) == types
    assert Counter((names[a], names[b]) for a, b, _ in diagram.edges) == edges
    # The root is drawn first and gradients flow from it: it has no arrow coming in.
    assert z.grad_fn is not None
    (root,) = diagram.with_label(z.grad_fn.name())
    assert root == "n0" and all(b != root for _, b, _ in diagram.edges)


def test_legacy_hooks_are_marked_where_torch_puts_them() -> None:
    _, _, hooked = two_modules_in_torch()
    text = autograd_mermaid(captured("two_modules.yaml"))
    assert text is not None
    diagram = parse_flowchart(text)
    expected: dict[str, list[str]] = {}
    for module, node_type in sorted(hooked.items()):
        expected.setdefault(node_type, []).append(module or "<model>")
    marked: dict[str, list[str]] = {}
    for node in diagram.nodes.values():
        for line in node.lines:
            if line.startswith("legacy hook: "):
                marked[node.lines[0]] = line.removeprefix("legacy hook: ").split(", ")
    assert marked == expected
    assert marked["SigmoidBackward0"] == ["<model>", "module2", "module2.activation"]
    assert marked["MulBackward0"] == ["module"]
    # The mark is visible: those nodes and no others carry the highlight class.
    names = diagram.types()
    assert sorted(names[node] for node in diagram.classes["legacyhook"]) == sorted(expected)


def test_autograd_nodes_name_their_tensors() -> None:
    text = autograd_mermaid(captured("two_modules.yaml"))
    assert text is not None
    nodes = {node.lines[0]: node.lines for node in parse_flowchart(text).nodes.values()
             if node.lines[0] != "AccumulateGrad"}
    assert "grad_fn of z [1]" in nodes["SigmoidBackward0"]
    assert "grad_fn of y [2]" in nodes["MulBackward0"]  # module2.x is y: one tensor, one name
    leaves = sorted(node.lines[1] for node in parse_flowchart(text).nodes.values()
                    if node.lines[0] == "AccumulateGrad")
    assert leaves == ["leaf module.p [2]", "leaf module2.l.weight [1, 2]", "leaf x []"]


# --- the forward diagram ----------------------------------------------------------------------


def test_the_forward_of_two_modules() -> None:
    model, _, _ = two_modules_in_torch()
    x = torch.tensor(5.0, requires_grad=True)
    y = model.module(x)
    t = model.module2.l(y)
    z = model.module2.activation(t)

    def shape(tensor: torch.Tensor) -> str:
        return "[" + ", ".join(str(size) for size in tensor.shape) + "]"

    text = forward_mermaid(captured("two_modules.yaml"))
    assert text is not None
    diagram = parse_flowchart(text)
    tensors = sorted((node.shape, node.lines[0]) for node in diagram.nodes.values()
                     if node.shape in ("stadium", "cylinder", "rounded"))
    assert tensors == sorted([
        ("stadium", f"x {shape(x)}"),
        ("cylinder", f"p {shape(model.module.p)}"),
        ("cylinder", f"weight {shape(model.module2.l.weight)}"),
        ("rounded", f"y {shape(y)}"),
        ("rounded", f"t {shape(t)}"),
        ("rounded", f"z {shape(z)}"),
    ])
    by_label = {node.lines[0]: node_id for node_id, node in diagram.nodes.items()}
    # module2 reads its argument as `x`, but it is y: the same node feeds the layer call.
    call = by_label["t = l(x)"]
    assert (by_label["y [2]"], call, None) in diagram.edges
    assert (by_label["x []"], call, None) not in diagram.edges
    # The Linear's call and its weight are grouped in a subgraph of the layer, in module2's.
    assert sorted(diagram.subgraphs.values()) == [
        ("module", ""), ("module2", ""), ("module2.l", "module2")]
    assert diagram.nodes[by_label["y = p * x"]].subgraph == "module"
    assert diagram.nodes[call].subgraph == "module2.l"
    assert diagram.nodes[by_label["weight [1, 2]"]].subgraph == "module2.l"
    assert diagram.nodes[by_label["z = activation(t)"]].subgraph == "module2"
    assert diagram.nodes[by_label["z = module2(y)"]].subgraph == ""
    assert diagram.nodes[by_label["z = module2(y)"]].shape == "subroutine"


def test_nested_modules_nest_their_subgraphs() -> None:
    session = capture_text(NESTED, "nested.yaml")
    text = forward_mermaid(session)
    assert text is not None
    diagram = parse_flowchart(text)
    assert sorted(diagram.subgraphs.values()) == [
        ("outer", ""), ("outer.middle", "outer"), ("outer.middle.inner", "outer.middle")]
    nodes = {node.lines[0]: node for node in diagram.nodes.values()}
    assert (nodes["b [3]"].shape, nodes["b [3]"].subgraph) == ("cylinder", "outer.middle")
    # inner's argument u is h * b, computed inline: not a leaf, so not drawn as a parameter.
    assert (nodes["u [3]"].shape, nodes["u [3]"].subgraph) == ("rounded", "outer.middle.inner")
    graph = autograd_mermaid(session)
    assert graph is not None
    parse_flowchart(graph)


def test_step_text_is_escaped() -> None:
    session = captured("two_modules.yaml")
    odd = 'y = p * x  # "why" <not> & `this`'
    first = dataclasses.replace(session.forward[0], text=odd)
    text = forward_mermaid(dataclasses.replace(session, forward=(first, *session.forward[1:])))
    assert text is not None
    assert odd in [node.lines[0] for node in parse_flowchart(text).nodes.values()]


def chain(steps: int) -> Session:
    lines = "\n".join(f'  - "h{i} = h{i - 1} * 2"' for i in range(1, steps + 1))
    text = (f"inputs:\n  h0: {{value: [1.0], requires_grad: true}}\nforward:\n{lines}\n"
            f"backward: h{steps}\n")
    return capture_text(text, "chain.yaml")


def test_too_large_or_empty_gives_none() -> None:
    # A chain of n steps: forward 1 input + n boxes + n tensors, autograd n nodes + 1 leaf.
    most = (MAX_NODES - 1) // 2
    assert forward_mermaid(chain(most)) is not None
    assert forward_mermaid(chain(most + 1)) is None
    longest = chain(MAX_NODES - 1)
    drawn = autograd_mermaid(longest)
    assert drawn is not None and len(parse_flowchart(drawn).nodes) == MAX_NODES
    assert autograd_mermaid(chain(MAX_NODES)) is None
    session = captured("two_modules.yaml")
    assert forward_mermaid(dataclasses.replace(session, forward=())) is None
    empty = tuple(dataclasses.replace(trace, graph=()) for trace in session.traces)
    assert autograd_mermaid(dataclasses.replace(session, traces=empty)) is None


# --- the same bytes for the same session ------------------------------------------------------


@pytest.mark.parametrize("spec", ["two_modules.yaml", "multi_output.yaml", "cnn_hooks.yaml"])
def test_output_is_deterministic_and_survives_json(spec: str, tmp_path: Path) -> None:
    session = captured(spec)
    path = tmp_path / "session.json"
    save_session(session, path)
    loaded = load_session(path)
    for render in (forward_mermaid, autograd_mermaid):
        first = render(session)
        assert first is not None
        assert render(session) == first
        assert render(loaded) == first


def test_identity_wrappers_are_looked_through() -> None:
    # The full pass's graph has BackwardHookFunctionBackward wrappers around every module; drawn
    # through the same function, only torch's real nodes and edges may remain.
    session = captured("two_modules.yaml")
    full = session.trace("full")
    assert full is not None
    assert any(node.name == "BackwardHookFunctionBackward" for node in full.graph)
    as_legacy = dataclasses.replace(session, traces=(dataclasses.replace(full, mode="legacy"),))
    text = autograd_mermaid(as_legacy)
    assert text is not None
    diagram = parse_flowchart(text)
    _, z, _ = two_modules_in_torch()
    types, edges = torch_graph(z.grad_fn)
    names = diagram.types()
    assert Counter(names.values()) == types
    assert Counter((names[a], names[b]) for a, b, _ in diagram.edges) == edges
