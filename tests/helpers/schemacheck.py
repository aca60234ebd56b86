"""Checking JSON documents against the schemas gradexplain ships (gradexplain/schemas/).

`assert_valid` validates a document against the shipped schema and against a strict variant
(`strict`) that allows no key the schema does not list, so output that grows a key fails until
the schema (and docs/json.md) describe it. `documents` builds every document of one session
in-process, as the command line builds them; `walk_items`, `first` and `at` find places in a
document. Used by the tests in tests/schemas/.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

import gradexplain.schemas
from gradexplain.analysis.diff import compare
from gradexplain.analysis.order import first_firing_order
from gradexplain.records.codec import to_data
from gradexplain.records.session import SCHEMA as SESSION_SCHEMA
from gradexplain.records.session import Session, session_json
from gradexplain.render.distributed_diff_json import SCHEMA as DISTRIBUTED_DIFF_SCHEMA
from gradexplain.render.distributed_json import SCHEMA as DISTRIBUTED_SCHEMA
from gradexplain.render.json_diff import SCHEMA as DIFF_SCHEMA
from gradexplain.render.json_diff import diff_json
from gradexplain.render.json_walk import SCHEMA as WALK_SCHEMA
from gradexplain.render.json_walk import walk_json
from gradexplain.render.select import select
from gradexplain.schemas import SchemaName, load_schema
from tests.helpers.capture import captured
from tests.helpers.cli import REPO

JSON = dict[str, Any]
KeyPath = list[str | int]
SCHEMA_DIR = Path(gradexplain.schemas.__file__).parent
DOCS = REPO / "docs" / "json.md"
SCHEMA_IDS: dict[SchemaName, str] = {
    "walk": WALK_SCHEMA, "diff": DIFF_SCHEMA, "session": SESSION_SCHEMA,
    "walk-distributed": DISTRIBUTED_SCHEMA, "diff-distributed": DISTRIBUTED_DIFF_SCHEMA}

# DESIGN section 5, the contract, key by key: the walk schema's $defs (and "" for the document
# itself) that must require them. An argument also needs `value`, or `summary` instead.
CONTRACT_KEYS = {
    "": ["schema", "torch", "spec", "passes"],
    "pass": ["mode", "events", "grads"],
    "event": ["seq", "phase", "hook", "target", "node", "args"],
    "argument": ["name", "shape", "meaning", "check"],
    "meaning": ["of", "wrt", "aliases", "layout", "text", "latex"],
    "check": ["verified", "max_abs_err"],
}
CONTRACT_ENUMS = {
    ("event", "hook"): ["forward_pre", "forward", "backward", "full_backward_pre",
                        "full_backward", "tensor", "post_accumulate_grad", "node_pre", "node"],
    ("meaning", "layout"): ["as-is", "transposed", "reshaped", "summed"],
    ("pass", "mode"): ["legacy", "full"],
    ("event", "phase"): ["forward", "backward"],
}

# --- schemas and validation -------------------------------------------------------------------


def strict(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` on every object schema that lists
    `properties`: documents may then hold no key the schema does not describe."""
    if not isinstance(schema, dict):
        return schema
    result = dict(schema)
    for key in ("properties", "$defs"):
        if key in schema:
            result[key] = {name: strict(item) for name, item in schema[key].items()}
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if key in schema:
            result[key] = [strict(item) for item in schema[key]]
    for key in ("items", "additionalProperties", "not"):
        if key in schema:
            result[key] = strict(schema[key])
    if "properties" in schema:
        result["additionalProperties"] = False
    return result


@functools.cache
def validator(name: SchemaName, strict_: bool = False) -> Draft202012Validator:
    schema = load_schema(name)
    return Draft202012Validator(strict(schema) if strict_ else schema)


def problem(document: Any, name: SchemaName, strict_: bool = False) -> str | None:
    """Where and why `document` does not fit (for the failure message), or None if it fits."""
    error = best_match(validator(name, strict_).iter_errors(document))
    if error is None:
        return None
    return f"at {error.json_path}: {error.message[:300]}"


def assert_valid(document: Any, name: SchemaName, what: str, strict_only: bool = False) -> None:
    """`document` fits the shipped schema and its strict variant. A document that fits the
    strict variant fits the shipped schema too (test_strict_variant_only_narrows), so
    `strict_only` saves the second pass over a large document."""
    for strict_ in (True,) if strict_only else (False, True):
        found = problem(document, name, strict_)
        if found is not None:
            kind = "strict variant of the" if strict_ else "shipped"
            pytest.fail(f"{what} does not fit the {kind} {name} schema {found}", pytrace=False)


def assert_invalid(document: Any, name: SchemaName) -> None:
    assert problem(document, name) is not None, f"the {name} schema accepted a broken document"


def parsed(document: JSON) -> JSON:
    """The document as a user reads it: strict JSON (no NaN) parsed back."""
    loaded: JSON = json.loads(json.dumps(document, ensure_ascii=False, allow_nan=False))
    return loaded


# --- documents, built in-process as the command line builds them ------------------------------


def walk_document(session: Session, order: bool) -> JSON:
    """`walk --format json` (cli.walk: both passes, nothing filtered; --order adds the firing
    order of each pass's first call)."""
    document = walk_json(select(session.walk, ("legacy", "full"), None, []))
    if order:
        orders = [first_firing_order(trace) for trace in session.traces]
        document["firing_order"] = [to_data(item) for item in orders if item is not None]
    return parsed(document)


@functools.cache
def spec_documents(spec_file: str) -> dict[str, tuple[SchemaName, JSON]]:
    return documents(captured(spec_file))


def documents(session: Session) -> dict[str, tuple[SchemaName, JSON]]:
    """Every document of one session: label -> (schema name, document)."""
    return {
        "walk": ("walk", walk_document(session, order=False)),
        "walk --order": ("walk", walk_document(session, order=True)),
        "diff": ("diff", parsed(diff_json(compare(session)))),
        "session": ("session", parsed(session_json(session))),
    }


def walk_items(data: Any, path: KeyPath | None = None) -> Iterator[tuple[KeyPath, Any]]:
    """Every value in a JSON document with its path, depth first."""
    path = path or []
    yield path, data
    if isinstance(data, dict):
        for key, item in data.items():
            yield from walk_items(item, [*path, key])
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from walk_items(item, [*path, index])


def first(document: Any, test: Callable[[KeyPath, Any], bool]) -> KeyPath:
    found = next((path for path, item in walk_items(document) if test(path, item)), None)
    assert found is not None, "the document has no such place"
    return found


def at(document: Any, path: KeyPath) -> Any:
    for key in path:
        document = document[key]
    return document
