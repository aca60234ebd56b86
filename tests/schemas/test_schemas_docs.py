"""docs/json.md describes the schemas: its JSON examples validate, it names every key of the
hand-built parts, and its validation snippet works.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gradexplain.schemas import SchemaName, load_schema
from tests.helpers.capture import captured
from tests.helpers.mdcheck import fences
from tests.helpers.schemacheck import (
    DOCS,
    SCHEMA_IDS,
    assert_valid,
    walk_document,
)


def test_docs_json_examples_validate() -> None:
    examples = [json.loads(block) for block in fences(DOCS.read_text(encoding="utf-8"), "json")]
    kinds = {name: 0 for name in SCHEMA_IDS}
    for example in examples:
        name = next(name for name, schema_id in SCHEMA_IDS.items()
                    if schema_id == example.get("schema"))
        kinds[name] += 1
        assert_valid(example, name, f"docs/json.md's {name} example")
    assert kinds["walk"] and kinds["diff"] and kinds["diff-distributed"], kinds


def test_docs_name_every_key_of_the_hand_built_parts() -> None:
    text = DOCS.read_text(encoding="utf-8")
    names: list[SchemaName] = ["walk", "diff", "walk-distributed", "diff-distributed"]
    for name in names:
        schema = load_schema(name)
        parts = [schema, *(part for part in schema["$defs"].values()
                           if not part.get("description", "").startswith("codec.to_data of"))]
        for part in parts:
            for key in part.get("properties", {}):
                assert f"`{key}`" in text, f"docs/json.md does not mention `{key}` ({name})"


def test_docs_validation_snippet_works(tmp_path: Path) -> None:
    snippet = next(block for block in fences(DOCS.read_text(encoding="utf-8"), "python")
                   if "jsonschema" in block)
    document = walk_document(captured("two_modules.yaml"), order=False)
    (tmp_path / "walk.json").write_text(json.dumps(document), encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    del document["passes"][0]["events"][0]["hook"]
    (tmp_path / "walk.json").write_text(json.dumps(document), encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode != 0
