"""The forward diagram's layout, read structurally from the mermaid text (a browser is not needed
to see it stays readable): top-down for long chains of steps, left to right for short ones;
each built-in layer's call grouped with its parameters in a subgraph of its own (torch says which
layers have parameters); short labels and lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradexplain.capture.build import build
from gradexplain.language import load_spec
from gradexplain.render.mermaid import LONG_CHAIN, forward_mermaid
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS
from tests.render.test_mermaid import chain, parse_flowchart

SPEC_FILES = sorted(SPECS.glob("*.yaml"))
LABEL_WIDTH = 24
LINE_WIDTH = 40


@pytest.mark.parametrize("steps", [1, 2, LONG_CHAIN, LONG_CHAIN + 1, LONG_CHAIN + 6])
def test_a_long_chain_is_drawn_top_down(steps: int) -> None:
    text = forward_mermaid(chain(steps))
    assert text is not None
    assert parse_flowchart(text).direction == ("TD" if steps > LONG_CHAIN else "LR")


def test_the_cnn_is_drawn_top_down_and_two_modules_left_to_right() -> None:
    # cnn_hooks: eight layers in a row, then the score; two_modules: three steps.
    for spec, direction in [("cnn_hooks.yaml", "TD"), ("cam_capture.yaml", "TD"),
                            ("two_modules.yaml", "LR")]:
        text = forward_mermaid(captured(spec))
        assert text is not None
        assert parse_flowchart(text).direction == direction, spec


@pytest.mark.parametrize("path", SPEC_FILES, ids=[path.stem for path in SPEC_FILES])
def test_each_layer_with_parameters_has_a_subgraph_with_them(path: Path) -> None:
    session = captured(path.name)
    text = forward_mermaid(session)
    assert text is not None
    diagram = parse_flowchart(text)
    model = build(load_spec(path)).model
    titles = {identifier: title for identifier, (title, _) in diagram.subgraphs.items()}
    for step in session.forward:
        if step.calls is None:
            continue
        assert _is_module_path(model, step.calls), step.calls
        own = dict(model.get_submodule(step.calls).named_parameters(recurse=False))
        box = next(node for node in diagram.nodes.values() if node.lines[0] == step.text)
        layer_of_module = step.calls.rpartition(".")[0] == step.module
        if own and layer_of_module and step.calls not in titles.values():
            pytest.fail(f"{step.calls} has parameters but no subgraph")
        if box.subgraph == step.calls:
            # Its parameters beside it: one cylinder per parameter torch lists for the layer.
            cylinders = [node for node in diagram.nodes.values()
                         if node.subgraph == step.calls and node.shape == "cylinder"]
            assert sorted(node.lines[0].split(" ")[0] for node in cylinders) == sorted(own)


def _is_module_path(model: object, path: str) -> bool:
    try:
        model.get_submodule(path)  # type: ignore[attr-defined]
    except AttributeError:
        return False
    return True


@pytest.mark.parametrize("path", SPEC_FILES, ids=[path.stem for path in SPEC_FILES])
def test_labels_and_lines_are_short(path: Path) -> None:
    text = forward_mermaid(captured(path.name))
    assert text is not None
    assert max(len(line) for line in text.splitlines()) <= LINE_WIDTH
    for node in parse_flowchart(text).nodes.values():
        assert all(len(line) <= LABEL_WIDTH for line in node.lines), node.lines
        assert not any(line.startswith("calls ") for line in node.lines)
