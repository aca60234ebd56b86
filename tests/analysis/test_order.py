"""The firing-order lesson (gradexplain/order.py and render/order_render.py): torch is the oracle.

The classic two-module example is hooked by hand in plain PyTorch, with the same kinds of hooks
registered in the same order as the tracer registers them, and the order they fire in must be the
order firing_order reports. Every step of every spec's runs must agree with its rule, and a trace
with two events swapped must not.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.analysis.order import GLOBAL_FIRST, RULES, FiringOrder, firing_order
from gradexplain.api import explain
from gradexplain.records.trace import Mode, PassTrace
from gradexplain.render.console import plain_text
from gradexplain.render.order import order_markdown, order_text
from tests.helpers.articles import MyModule, MyModule2
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS
from tests.helpers.mdcheck import assert_markdown_well_formed, tables

Log = list[tuple[str, str]]
Name = Callable[[str, torch.Tensor], None]


class _NamedModule(MyModule):
    """`y = p * x`, naming its argument and result as the spec's steps name them."""

    def __init__(self, name: Name) -> None:
        super().__init__()
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.name("module.x", x)
        y = self.p * x
        self.name("module.y", y)
        return y


class _NamedModule2(MyModule2):
    """Linear then Sigmoid, naming the argument and each step's result."""

    def __init__(self, name: Name) -> None:
        super().__init__()
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.name("module2.x", x)
        t = self.l(x)
        self.name("module2.t", t)
        z: torch.Tensor = self.activation(t)
        self.name("module2.z", z)
        return z


class _NamedTop(nn.Module):
    """specs/two_modules.yaml's top level: `y = module(x)`, then `z = module2(y)`."""

    def __init__(self, name: Name) -> None:
        super().__init__()
        self.module = _NamedModule(name)
        self.module2 = _NamedModule2(name)
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The top level's own argument is not named here: with full hooks it is a view of x,
        # which answers to x's name without a hook of its own; without, it is x itself.
        y = self.module(x)
        self.name("y", y)
        z: torch.Tensor = self.module2(y)
        self.name("z", z)
        return z


def _classic_in_torch(mode: Mode) -> Log:
    """The hooks that fire in `z.backward()` of the classic example, as (hook kind, what on):
    a module path, a tensor's name (its top-level one if it has one), a leaf, or for Node hooks
    the node's name. Registered in the tracer's order: module hooks, leaf hooks, the forward
    (naming tensors as it goes), then Node hooks on the graph, breadth-first."""
    log: Log = []
    names: dict[int, list[str]] = {}
    kept: list[torch.Tensor] = []  # keeps id() unique while names are keyed by it

    def shown(key: int) -> str:
        top = [name for name in names[key] if "." not in name]
        return (top or names[key])[0]

    def name(label: str, tensor: torch.Tensor) -> None:
        key = id(tensor)
        if key in names:
            names[key].append(label)
            return
        names[key] = [label]
        kept.append(tensor)
        tensor.register_hook(lambda grad: log.append(("tensor", shown(key))))

    def module_hook(kind: str, path: str) -> Callable[..., None]:
        return lambda *args: log.append((kind, path))

    model = _NamedTop(name)
    x = torch.tensor(5.0, requires_grad=True)
    for path, module in model.named_modules():
        module.register_forward_pre_hook(module_hook("forward_pre", path))
        module.register_forward_hook(module_hook("forward", path))
        if mode == "legacy":
            module.register_backward_hook(module_hook("backward", path))
        else:
            module.register_full_backward_pre_hook(module_hook("full_backward_pre", path))
            module.register_full_backward_hook(module_hook("full_backward", path))
    leaves = {"x": x, **dict(model.named_parameters())}
    for leaf_name, leaf in leaves.items():
        name(leaf_name, leaf)
        leaf.register_post_accumulate_grad_hook(
            lambda tensor, leaf_name=leaf_name: log.append(("post_accumulate_grad", leaf_name)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy hooks' FutureWarnings are not the point
        z = model(x)
    queue: list[Any] = [z.grad_fn]
    seen: list[Any] = []
    while queue:
        node = queue.pop(0)
        if node in seen:
            continue
        seen.append(node)
        node.register_prehook(lambda grads, node=node: log.append(("node_pre", node.name())))
        node.register_hook(lambda grads, outs, node=node: log.append(("node", node.name())))
        queue.extend(child for child, _ in node.next_functions if child is not None)
    log.clear()  # only the backward is compared
    z.backward()
    return log


def _seen(order: FiringOrder) -> Log:
    """firing_order's steps in the oracle's terms: Node hooks by node name, the rest by target."""
    return [(step.hook, (step.node or "") if step.hook in ("node_pre", "node") else step.target)
            for step in order.steps]


def _trace(mode: Mode, spec: str = "two_modules.yaml") -> PassTrace:
    legacy, full = captured(spec).traces
    return legacy if mode == "legacy" else full


def _order(mode: Mode, spec: str = "two_modules.yaml", run: int = 1) -> FiringOrder:
    order = firing_order(_trace(mode, spec), run)
    assert order is not None
    return order


@pytest.mark.parametrize("mode", ["legacy", "full"])
def test_torch_fires_the_hooks_in_the_order_reported(mode: Mode) -> None:
    assert _seen(_order(mode)) == _classic_in_torch(mode)


def test_module_hooks_run_later_module_first_and_legacy_before_our_node_hook() -> None:
    legacy = _order("legacy")
    module_hooks = [step.target for step in legacy.steps if step.hook == "backward"]
    assert module_hooks == ["module2.activation", "module2", "", "module2.l", "module"]
    sigmoid = [step.hook for step in legacy.steps if step.group == "n2 SigmoidBackward0"]
    assert sigmoid == ["tensor", "node_pre", "backward", "backward", "backward", "node"]
    full = _order("full")
    wrapper_hooks = {step.hook: step.node for step in full.steps if step.target == "module2"
                     and step.hook in ("full_backward_pre", "full_backward")}
    assert wrapper_hooks == {"full_backward_pre": "BackwardHookFunctionBackward",
                             "full_backward": "BackwardHookFunctionBackward"}


@pytest.mark.parametrize("mode", ["legacy", "full"])
def test_a_leaf_turn_is_tensor_pre_accumulate_post(mode: Mode) -> None:
    order = _order(mode)
    leaf = [(step.hook, step.rule) for step in order.steps if step.group.startswith("leaf x ")]
    assert [hook for hook, _ in leaf] == ["tensor", "node_pre", "post_accumulate_grad", "node"]
    assert len({rule for _, rule in leaf}) == 4


@pytest.mark.parametrize("spec", sorted(path.name for path in SPECS.glob("*.yaml")))
def test_every_step_of_every_spec_holds(spec: str) -> None:
    for trace in captured(spec).traces:
        for run in trace.runs:
            order = firing_order(trace, run.index)
            if order is None:
                continue
            assert [step.position for step in order.steps] == list(
                range(1, len(order.steps) + 1))
            wrong = [step for step in order.steps if not step.holds]
            assert not wrong, f"{spec} {trace.mode} run {run.index}: {wrong}"
            assert order.rules[-1] == GLOBAL_FIRST
            assert list(order.rules) == [rule for rule in RULES if rule in order.rules]
            assert {step.rule for step in order.steps} | {GLOBAL_FIRST} == set(order.rules)


def test_a_grad_call_captures_the_leaf_instead_of_accumulating() -> None:
    order = _order("full", "multi_output.yaml")
    leaf = [step for step in order.steps if step.target == "x_temp"]
    assert [step.hook for step in leaf] == ["tensor"]
    assert "autograd.grad" in leaf[0].rule
    assert not any(step.hook == "post_accumulate_grad" for step in order.steps)


def test_full_hook_of_a_module_without_grad_inputs_runs_on_the_output_side() -> None:
    order = _order("full", "embedding.yaml")
    emb = [step for step in order.steps if step.target == "emb"]
    assert [step.hook for step in emb] == ["full_backward_pre", "full_backward"]
    assert emb[0].group == emb[1].group
    assert "no input wrapper" in emb[1].rule


def _swapped(trace: PassTrace, first: int, second: int) -> PassTrace:
    """The trace with two events' places in the timeline exchanged (their seq numbers too)."""
    a, b = trace.events[first], trace.events[second]
    events = list(trace.events)
    events[first], events[second] = replace(b, seq=a.seq), replace(a, seq=b.seq)
    return replace(trace, events=tuple(events))


@pytest.mark.parametrize("mode", ["legacy", "full"])
def test_every_swap_of_neighbours_is_caught(mode: Mode) -> None:
    """Two hook calls swapped anywhere in the two-module run always break some rule."""
    trace = _trace(mode)
    positions = [index for index, event in enumerate(trace.events) if event.run == 1]
    for first, second in pairwise(positions):
        order = firing_order(_swapped(trace, first, second), 1)
        assert order is not None
        assert order.out_of_order, (trace.events[first], trace.events[second])


def test_out_of_order_is_loud_in_text_and_markdown() -> None:
    trace = _trace("legacy")
    tensor_z = next(index for index, event in enumerate(trace.events)
                    if event.run == 1 and event.hook == "tensor")
    order = firing_order(_swapped(trace, tensor_z, tensor_z + 1), 1)
    assert order is not None
    wrong = [step for step in order.steps if not step.holds]
    # The node's pre-hook now comes first: the tensor hook that should open the turn is second,
    # and the legacy hook no longer follows the pre-hook straight away.
    assert [(step.position, step.hook) for step in wrong] == [(2, "tensor"), (3, "backward")]
    text = plain_text(order_text(order), 100)
    assert "✗ out of order" in text
    assert f"{len(wrong)} of {len(order.steps)} hook calls out of order" in text
    assert "✗ out of order" in order_markdown(order, 2)


def test_run_without_events_and_forward_run() -> None:
    assert firing_order(_trace("legacy"), 99) is None
    with pytest.raises(ValueError, match="run 0"):
        firing_order(_trace("legacy"), 0)


@pytest.mark.parametrize("mode", ["legacy", "full"])
def test_text_shows_every_position_and_rule(mode: Mode) -> None:
    order = _order(mode)
    text = plain_text(order_text(order), 100)
    assert all(len(line) <= 100 for line in text.splitlines())
    flat = " ".join(text.split())
    for step in order.steps:
        assert re.search(rf"^ *{step.position} +{step.hook} ", text, re.MULTILINE), step
    for number, rule in enumerate(order.rules, start=1):
        assert f"{number} {rule}" in flat
    assert "<model>" in text
    assert "✗" not in text


@pytest.mark.parametrize("mode", ["legacy", "full"])
def test_markdown_is_well_formed_with_a_row_per_step(mode: Mode) -> None:
    order = _order(mode)
    page = order_markdown(order, 3)
    assert_markdown_well_formed(page)
    assert page.startswith(f"### Firing order: {mode} pass, run 1\n")
    ((headers, rows),) = tables(page)
    assert headers == ["#", "hook", "on", "node", "rule"]
    assert [row[0] for row in rows] == [str(step.position) for step in order.steps]
    for number, rule in enumerate(order.rules, start=1):
        assert f"- rule {number}: " in page
        assert rule.split(" ")[-1] in page


class _Checkpointed(nn.Module):
    """A Linear and a GELU under non-reentrant checkpoint, then a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(4, 4), nn.GELU())
        self.b = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        inner: torch.Tensor = checkpoint(self.a, x, use_reentrant=False)
        out: torch.Tensor = self.b(inner)
        return out


def test_a_checkpointed_forward_runs_inside_the_backward_and_every_step_holds() -> None:
    """torch runs a checkpointed forward again when a node unpacks what it did not save: its
    forward hooks fire inside the backward, within that node's turn (before, each was ✗)."""
    from gradexplain.analysis.order import RECOMPUTED
    from gradexplain.api import explain

    torch.manual_seed(0)
    model = _Checkpointed()
    log: list[str] = []
    x = torch.randn(2, 4, requires_grad=True)
    out = model(x)
    model.a.register_forward_pre_hook(lambda module, args: log.append("forward_pre"))
    assert out.grad_fn is not None
    out.sum().backward()
    assert log == ["forward_pre"]  # the oracle: torch ran the forward again in the backward
    explanation = explain(_Checkpointed(), x.detach().requires_grad_())
    assert explanation.failures() == []
    for trace in explanation.session.passes(("legacy", "full")):
        order = firing_order(trace, 1)
        assert order is not None
        assert [step for step in order.steps if not step.holds] == [], trace.mode
        recomputed = [step for step in order.steps if step.hook in ("forward_pre", "forward")]
        assert recomputed and all(step.rule == RECOMPUTED for step in recomputed)
        # each in a node's turn: the label names the node whose unpacking ran it
        assert all(step.group != "unknown node" for step in recomputed)


class _CalledTwice(nn.Module):
    """One Linear called twice, one call's input requiring grad and the other's not: that
    call's full backward hook has no input wrapper and fires from its output wrapper."""

    def __init__(self, constant_first: bool) -> None:
        super().__init__()
        self.l = nn.Linear(3, 3)
        self.constant_first = constant_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        constant = torch.ones(2, 3)
        if self.constant_first:
            out: torch.Tensor = self.l(constant) * self.l(x)
        else:
            out = self.l(x) + self.l(constant)
        return out


def _module_hooks_in_torch(model: nn.Module, x: torch.Tensor) -> Log:
    log: Log = []
    for path, module in model.named_modules():
        module.register_full_backward_pre_hook(
            lambda *args, path=path: log.append(("full_backward_pre", path)))
        module.register_full_backward_hook(
            lambda *args, path=path: log.append(("full_backward", path)))
    model(x).sum().backward()
    return log


@pytest.mark.parametrize("constant_first", [True, False])
def test_each_call_of_a_module_is_read_on_its_own_side(constant_first: bool) -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _CalledTwice(constant_first)
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    result = explain(copy.deepcopy(model), x.clone().requires_grad_())
    full = next(trace for trace in result.session.traces if trace.mode == "full")
    order = firing_order(full, 1)
    assert order is not None
    wrong = [step for step in order.steps if not step.holds]
    assert not wrong, wrong
    rules = {step.rule for step in order.steps if step.hook == "full_backward"}
    assert len(rules) == 2  # one call on its input side, the other from its output
    expected = _module_hooks_in_torch(copy.deepcopy(model), x.clone().requires_grad_())
    assert [(step.hook, step.target) for step in order.steps
            if step.hook in ("full_backward_pre", "full_backward")] == expected
