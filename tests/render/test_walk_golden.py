"""The walk itself held still: every spec's `walk --format json` and its full text timeline, and
two Python models' JSON, against golden files (numbers within another CPU's rounding). An
optimisation of the capture, the checks or the renderers must leave every label, check and line
as it was; `pytest --update-golden` is the only way to change these files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gradexplain.api import Explanation, explain
from gradexplain.render.console import plain_text
from tests.helpers.capture import captured
from tests.helpers.cli import REPO, SPECS
from tests.helpers.golden_json import json_mismatch

SPEC_FILES = sorted(path.name for path in SPECS.glob("*.yaml"))


def json_text(data: dict[str, Any]) -> str:
    """One layout for the golden files whatever the layout the CLI prints: keys in their order,
    one per line, so that a change reads as a diff of the fields that changed."""
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("spec", SPEC_FILES)
def test_walk_json_matches_its_golden_file(spec: str, golden: Any) -> None:
    golden(f"walk/{Path(spec).stem}.json", json_text(Explanation(captured(spec)).json()),
           mismatch=json_mismatch)


@pytest.mark.parametrize("spec", SPEC_FILES)
def test_walk_timeline_matches_its_golden_file(spec: str, golden: Any) -> None:
    explanation = Explanation(captured(spec))
    text = plain_text(explanation.text(collapse=False, timeline=True)) + "\n"
    golden(f"walk/{Path(spec).stem}.txt", text)


def _example(name: str) -> Any:
    namespace: dict[str, Any] = {}
    source = (REPO / "examples" / "models.py").read_text(encoding="utf-8")
    exec(compile(source, "examples/models.py", "exec"), namespace)  # our own examples file
    return namespace[name]


@pytest.mark.parametrize(("name", "shape"), [("make_mlp", (4, 3)), ("make_cnn", (2, 1, 8, 8))])
def test_python_model_json_matches_its_golden_file(name: str, shape: tuple[int, ...],
                                                   golden: Any) -> None:
    explanation = explain(_example(name), shape)
    golden(f"walk/{name}.json", json_text(explanation.json()), mismatch=json_mismatch)
