"""What gradexplain writes fits the schemas it ships (gradexplain/schemas/).

Every spec's walk (with and without --order), diff and session is validated in-process, and so
are a Python model's documents with value summaries and a spec's with non-finite values; a few
runs of the real command line prove that what it prints and saves validates too. Each document
is validated against the shipped schema and against its strict variant
(tests/helpers/schemacheck.py), which allows no key the schema does not list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gradexplain.schemas import SchemaName, load_schema
from tests.helpers.capture import capture_text
from tests.helpers.cli import REPO, SPECS, run_cli
from tests.helpers.schemacheck import (
    SCHEMA_IDS,
    assert_valid,
    at,
    documents,
    spec_documents,
    strict,
    walk_items,
)

SPEC_FILES = sorted(path.name for path in SPECS.glob("*.yaml"))

NON_FINITE_SPEC = """\
name: nonfinite
inputs:
  x: {value: [0.0, 1.0], requires_grad: true}
forward: ["y = log(x)", "w = y * 0.0", "z = sum(w)"]
backward: {of: z, times: 2, retain_graph: true}
"""


# --- every spec, in-process ------------------------------------------------------------------


@pytest.mark.parametrize("spec_file", SPEC_FILES)
def test_every_spec_documents_validate(spec_file: str) -> None:
    docs = spec_documents(spec_file)
    plain, ordered = docs["walk"][1], docs["walk --order"][1]
    assert ordered["firing_order"], "no firing order to validate"
    # So plain walk JSON fits wherever --order's does (firing_order is not a required key).
    assert {key: item for key, item in ordered.items() if key != "firing_order"} == plain
    for label in ("walk --order", "diff", "session"):
        name, document = docs[label]
        assert document["schema"] == SCHEMA_IDS[name]
        assert_valid(document, name, f"{spec_file}: {label}", strict_only=True)


def loosen(schema: Any) -> Any:
    """`schema` without any `additionalProperties: false` next to `properties`."""
    if isinstance(schema, list):
        return [loosen(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {key: loosen(item) for key, item in schema.items()
            if not (key == "additionalProperties" and item is False and "properties" in schema)}


@pytest.mark.parametrize("name", list(SCHEMA_IDS))
def test_strict_variant_only_narrows(name: SchemaName) -> None:
    """The strict variant is the shipped schema plus `additionalProperties: false`, so a
    document that fits it fits the shipped schema."""
    shipped = load_schema(name)
    made = strict(shipped)
    assert made != shipped
    assert loosen(made) == loosen(shipped)
    closed = [item for _, item in walk_items(made)
              if isinstance(item, dict) and "properties" in item]
    assert closed and all(item["additionalProperties"] is False for item in closed)


def test_python_model_with_summaries_validates() -> None:
    from gradexplain.capture.pipeline import capture_target

    session = capture_target(f"{REPO / 'examples' / 'models.py'}:make_mlp", ["4x3"], None, "sum", 4)
    docs = documents(session)
    walk = docs["walk"][1]
    summaries = [item for path, item in walk_items(walk["passes"]) if path[-1:] == ["summary"]]
    assert summaries, "max_values 4 should summarise the 4x3 input"
    assert all("value" not in at(walk["passes"], path[:-1])
               for path, _ in walk_items(walk["passes"]) if path[-1:] == ["summary"])
    for label, (name, document) in docs.items():
        assert_valid(document, name, f"make_mlp: {label}")


def test_non_finite_values_validate(tmp_path: Path) -> None:
    """log(0): -inf forward values and inf/nan gradients, in every document."""
    session = capture_text(NON_FINITE_SPEC, str(tmp_path / "nonfinite.yaml"))
    docs = documents(session)
    walk, saved = docs["walk"][1], docs["session"][1]
    values = [item for path, item in walk_items(walk["passes"])
              if "value" in path and isinstance(item, list)]
    assert any(None in item for item in values), "no non-finite value in the walk's passes"
    assert any(item in ("inf", "-inf", "nan") for _, item in walk_items(saved["session"])), (
        "no non-finite value in the session")
    for label, (name, document) in docs.items():
        assert_valid(document, name, f"nonfinite: {label}")


# --- the real command line --------------------------------------------------------------------


def test_command_line_output_validates(tmp_path: Path) -> None:
    saved = tmp_path / "run.json"
    walk = run_cli("walk", "specs/two_modules.yaml", "--format", "json", "--order",
                   "--save", str(saved))
    assert walk.code == 0, walk.stderr
    document = json.loads(walk.stdout)
    assert document["firing_order"]
    assert_valid(document, "walk", "walk --format json --order")
    assert_valid(json.loads(saved.read_text(encoding="utf-8")), "session", "walk --save")
    diff = run_cli("diff", "--load", str(saved), "--format", "json")
    assert diff.code == 0, diff.stderr
    assert_valid(json.loads(diff.stdout), "diff", "diff --load --format json")


def test_python_model_command_line_output_validates() -> None:
    walk = run_cli("walk", "examples/models.py:make_mlp", "--input", "4x3", "--format", "json")
    assert walk.code == 0, walk.stderr
    assert_valid(json.loads(walk.stdout), "walk", "walk examples/models.py:make_mlp")
