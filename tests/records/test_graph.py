"""The graph view of a traced pass (records/graph.py) against torch's own graph: the same model
written in plain PyTorch here, walked along `grad_fn.next_functions` by hand, must give the
view's node order, edges, consumers and names. In the full pass the view must look through the
identity wrappers that module hooks add, and find the hook-free graph."""

from __future__ import annotations

import pytest

from gradexplain.capture.build import build
from gradexplain.capture.trace import trace
from gradexplain.language import load_spec_text
from gradexplain.records.graph import GraphView, Position
from gradexplain.records.names import HOOK_WRAPPER
from gradexplain.records.trace import Mode
from tests.helpers.graphs import SHARED_SPEC, accumulate_node, breadth_first, plain_shared

MODES: tuple[Mode, ...] = ("legacy", "full")


def view_of(mode: Mode) -> GraphView:
    return GraphView(trace(build(load_spec_text(SHARED_SPEC)), mode))


def position(view: GraphView, name: str) -> Position:
    record = view.trace.named(name)
    assert record is not None, name
    found = view.resolve(view.raw_position(record.index))
    assert found is not None, name
    return found


@pytest.mark.parametrize("mode", MODES)
def test_order_is_torchs_breadth_first_order(mode: Mode) -> None:
    plain = breadth_first(plain_shared()["s"])
    view = view_of(mode)
    assert [view.name_of(node) for node in view.order] == [node.name() for node in plain]
    assert HOOK_WRAPPER not in [view.name_of(node) for node in view.order]


def test_the_full_pass_has_wrappers_the_view_looks_through() -> None:
    """Not vacuous: the full pass's raw graph does hold wrappers, the legacy pass's none."""
    full, legacy = view_of("full"), view_of("legacy")
    assert any(node.name == HOOK_WRAPPER for node in full.trace.graph)
    assert not any(node.name == HOOK_WRAPPER for node in legacy.trace.graph)
    assert len(full.trace.graph) > len(full.order)


@pytest.mark.parametrize("mode", MODES)
def test_edges_are_torchs(mode: Mode) -> None:
    plain = breadth_first(plain_shared()["s"])
    view = view_of(mode)
    for index, node in enumerate(plain):
        expected = [(None if child is None else plain.index(child), number)
                    for child, number in node.next_functions]
        got = []
        for child, number in view.nodes[view.order[index]].next:
            real = view.resolve((child, number))
            got.append((None, number) if real is None else (view.rank[real[0]], real[1]))
        assert got == expected, node.name()


@pytest.mark.parametrize("mode", MODES)
def test_a_leaf_used_twice_has_torchs_two_consumers(mode: Mode) -> None:
    tensors = plain_shared()
    plain = breadth_first(tensors["s"])
    x_node = accumulate_node(tensors["x"])
    expected = {(index, number) for index, node in enumerate(plain)
                for number, (child, _) in enumerate(node.next_functions) if child == x_node}
    assert len(expected) == 2
    view = view_of(mode)
    got = {(view.rank[consumer], number)
           for consumer, number in view.consumers[position(view, "x")]}
    assert got == expected


@pytest.mark.parametrize("mode", MODES)
def test_names_sit_where_torch_puts_the_tensors(mode: Mode) -> None:
    tensors = plain_shared()
    plain = breadth_first(tensors["s"])
    view = view_of(mode)
    h = tensors["h"]
    h_at = (view.order[plain.index(h.grad_fn)], h.output_nr)
    assert "h" in view.names[h_at]
    w_at = (view.order[plain.index(accumulate_node(tensors["m.w"]))], 0)
    assert "m.w" in view.names[w_at]
    assert position(view, "h") == h_at and position(view, "m.w") == w_at
