"""The JSON documents gradexplain writes fit the schemas it ships (gradexplain/schemas/), which
are what tests/helpers/schemagen.py builds, and docs/json.md describes them.

Every spec's walk (with and without --order), diff and session is validated in-process; a few
runs of the real command line prove that what it prints and saves validates too. Each document
is validated against the shipped schema and against a strict variant that allows no key the
schema does not list, so output that grows a key fails here until the schema (and the docs)
describe it. Negative cases prove the validation can fail.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

import gradexplain.schemas
from gradexplain.analysis.diff import compare
from gradexplain.analysis.order import first_firing_order
from gradexplain.records.codec import DecodeError, from_data, to_data
from gradexplain.records.session import SCHEMA as SESSION_SCHEMA
from gradexplain.records.session import Session, session_json
from gradexplain.render.json_diff import SCHEMA as DIFF_SCHEMA
from gradexplain.render.json_diff import diff_json
from gradexplain.render.json_walk import SCHEMA as WALK_SCHEMA
from gradexplain.render.json_walk import walk_json
from gradexplain.render.select import select
from gradexplain.schemas import FILES, SchemaName, load_schema
from tests.helpers import schemagen
from tests.helpers.capture import capture_text, captured
from tests.helpers.cli import REPO, SPECS, run_cli
from tests.helpers.mdcheck import fences

JSON = dict[str, Any]
KeyPath = list[str | int]

SPEC_FILES = sorted(path.name for path in SPECS.glob("*.yaml"))
SCHEMA_DIR = Path(gradexplain.schemas.__file__).parent
DOCS = REPO / "docs" / "json.md"
SCHEMA_IDS: dict[SchemaName, str] = {
    "walk": WALK_SCHEMA, "diff": DIFF_SCHEMA, "session": SESSION_SCHEMA}

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

NON_FINITE_SPEC = """\
name: nonfinite
inputs:
  x: {value: [0.0, 1.0], requires_grad: true}
forward: ["y = log(x)", "w = y * 0.0", "z = sum(w)"]
backward: {of: z, times: 2, retain_graph: true}
"""


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


# --- the validation can fail ------------------------------------------------------------------


def two_modules(label: str) -> JSON:
    return copy.deepcopy(spec_documents("two_modules.yaml")[label][1])


def contract_object(document: JSON, where: str) -> JSON:
    """The first object of a contract $def in a walk document (a checked argument's meaning
    and check, so neither is null)."""
    if where == "":
        return document
    event = document["passes"][0]["events"][0]
    checked = next(arg for walk_pass in document["passes"] for event_ in walk_pass["events"]
                   for arg in event_["args"] if arg["check"] is not None)
    found: JSON = {"pass": document["passes"][0], "event": event, "argument": checked,
                   "meaning": checked["meaning"], "check": checked["check"]}[where]
    return found


@pytest.mark.parametrize(("where", "key"), [(where, key) for where, keys in CONTRACT_KEYS.items()
                                            for key in keys])
def test_walk_without_a_contract_key_is_rejected(where: str, key: str) -> None:
    document = two_modules("walk")
    assert problem(document, "walk") is None
    del contract_object(document, where)[key]
    assert_invalid(document, "walk")


@pytest.mark.parametrize("mutate", [
    "verified_string", "unknown_hook", "no_value_nor_summary", "nan_in_contract_value",
    "wrong_schema", "shape_negative",
])
def test_broken_walk_is_rejected(mutate: str) -> None:
    document = two_modules("walk")
    checked = contract_object(document, "argument")
    if mutate == "verified_string":
        checked["check"]["verified"] = "true"
    elif mutate == "unknown_hook":
        document["passes"][0]["events"][0]["hook"] = "backward_post"
    elif mutate == "no_value_nor_summary":
        del checked["value"]
    elif mutate == "nan_in_contract_value":
        checked["value"] = "nan"  # walk writes null for a non-finite value
    elif mutate == "wrong_schema":
        document["schema"] = "gradexplain.walk/2"
    else:
        checked["shape"] = [-1]
    assert_invalid(document, "walk")


def test_diff_row_without_legacy_is_rejected() -> None:
    document = two_modules("diff")
    assert problem(document, "diff") is None
    row = at(document, first(document, lambda path, item: path[-2:-1] == ["rows"]))
    del row["legacy"]
    assert_invalid(document, "diff")


def test_session_with_a_wrong_type_deep_inside_is_rejected() -> None:
    document = two_modules("session")
    assert problem(document, "session") is None
    path = first(document, lambda path, item: path[-1:] == ["shape"] and bool(item))
    assert len(path) > 6, path
    at(document, path)[0] = str(at(document, path)[0])
    assert_invalid(document, "session")


def _in_values(path: KeyPath, item: Any) -> bool:
    """A number inside a tensor's value list (not a 0-d value, which may be null)."""
    return isinstance(item, float) and isinstance(path[-1], int) and path[-2:-1] == ["value"]


# Each: where in the session, what to put there (DELETE removes the key), and whether
# `walk --load` reads the result. The schema must agree with the loader on every one.
DELETE = object()
LOADER_CASES: dict[str, tuple[Callable[[KeyPath, Any], bool], Any, bool]] = {
    "deep_wrong_type": (lambda path, item: path[-2:-1] == ["shape"], "2", False),
    "bool_for_int": (lambda path, item: path[-1:] == ["seq"], True, False),
    "float_for_int": (lambda path, item: path[-1:] == ["seq"], 1.5, False),
    "missing_required": (lambda path, item: path[-1:] == ["seq"], DELETE, False),
    "missing_defaulted": (lambda path, item: path[-1:] == ["node_id"], DELETE, True),
    "null_not_optional": (lambda path, item: path[-1:] == ["spec_text"], None, False),
    "literal_out_of_range": (lambda path, item: path[-1:] == ["mode"], "both", False),
    "inf_string_float": (lambda path, item: path[-1:] == ["max_abs_err"], "inf", True),
    "int_for_float": (lambda path, item: path[-1:] == ["max_abs_err"], 0, True),
    "other_string_float": (lambda path, item: path[-1:] == ["max_abs_err"], "Infinity", False),
    "nan_in_values": (lambda path, item: _in_values(path, item), "nan", True),
    "null_in_values": (lambda path, item: _in_values(path, item), None, False),
    "fixed_tuple_short": (lambda path, item: path[-2:-1] == ["next"], ["n0"], False),
    "fixed_tuple_null_node": (lambda path, item: path[-2:-1] == ["next"], [None, 0], True),
    "list_for_object": (lambda path, item: path[-1:] == ["walk"], [], False),
}


@pytest.mark.parametrize("case", list(LOADER_CASES))
def test_session_schema_accepts_what_load_accepts(case: str) -> None:
    test, replacement, loads = LOADER_CASES[case]
    document = two_modules("session")
    path = first(document["session"], test)
    parent = at(document["session"], path[:-1])
    if replacement is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    try:
        from_data(Session, document["session"])
        loader = True
    except DecodeError:
        loader = False
    assert loader is loads, f"{case}: expected the loader to {'read' if loads else 'refuse'} it"
    assert (problem(document, "session") is None) is loads, (
        f"{case}: the loader {'reads' if loads else 'refuses'} it, the schema does not agree")


def test_session_schema_refuses_unknown_keys_as_load_does() -> None:
    document = two_modules("session")
    at(document["session"], first(document["session"],
                                  lambda path, item: path[-1:] == ["events"]))[0]["extra"] = 1
    with pytest.raises(DecodeError):
        from_data(Session, document["session"])
    assert_invalid(document, "session")


# --- the shipped files ------------------------------------------------------------------------


def test_shipped_schemas_are_what_schemagen_makes(request: pytest.FixtureRequest) -> None:
    update = bool(request.config.getoption("--update-golden"))
    made = schemagen.schemas()
    for file, schema in made.items():
        path = SCHEMA_DIR / file
        text = schemagen.render(schema)
        if update:
            path.write_text(text, encoding="utf-8")
            continue
        shipped = path.read_text(encoding="utf-8") if path.exists() else ""
        if shipped != text:
            changes = "".join(list(difflib.unified_diff(
                shipped.splitlines(keepends=True), text.splitlines(keepends=True), str(path),
                "tests/helpers/schemagen.py"))[:40])
            pytest.fail(f"{path} is not what tests/helpers/schemagen.py makes: run python -m "
                        "pytest --update-golden, read git diff gradexplain/schemas and bring "
                        f"docs/json.md up to date\n{changes}", pytrace=False)
    assert sorted(path.name for path in SCHEMA_DIR.glob("*.json")) == sorted(made)


@pytest.mark.parametrize("name", list(FILES))
def test_load_schema_gives_each_shipped_file(name: SchemaName) -> None:
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert FILES[name] == schemagen.file_name(SCHEMA_IDS[name])
    assert schema == json.loads((SCHEMA_DIR / FILES[name]).read_text(encoding="utf-8"))
    assert schema["properties"]["schema"] == {"const": SCHEMA_IDS[name]}


def test_load_schema_refuses_an_unknown_name() -> None:
    with pytest.raises(ValueError, match="walk"):
        load_schema("report")  # type: ignore[arg-type]


def test_walk_schema_requires_every_contract_key() -> None:
    schema = load_schema("walk")
    for where, keys in CONTRACT_KEYS.items():
        part = schema if where == "" else schema["$defs"][where]
        assert sorted(part["required"]) == sorted(keys), where
        assert set(keys) <= set(part["properties"]), where
    argument = schema["$defs"]["argument"]
    assert argument["anyOf"] == [{"required": ["value"]}, {"required": ["summary"]}]
    for (where, key), values in CONTRACT_ENUMS.items():
        assert schema["$defs"][where]["properties"][key]["enum"] == values, (where, key)


def test_diff_argument_is_walks() -> None:
    walk, diff = load_schema("walk"), load_schema("diff")
    for name in ("argument", "values", "summary", "meaning", "check"):
        assert diff["$defs"][name] == walk["$defs"][name], name


def test_schemas_load_without_torch() -> None:
    code = ("import sys\n"
            "from gradexplain.schemas import load_schema\n"
            "for name in ('walk', 'diff', 'session'):\n"
            "    assert load_schema(name)['$schema']\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# --- docs/json.md -----------------------------------------------------------------------------


def test_docs_json_examples_validate() -> None:
    examples = [json.loads(block) for block in fences(DOCS.read_text(encoding="utf-8"), "json")]
    kinds = {name: 0 for name in SCHEMA_IDS}
    for example in examples:
        name = next(name for name, schema_id in SCHEMA_IDS.items()
                    if schema_id == example.get("schema"))
        kinds[name] += 1
        assert_valid(example, name, f"docs/json.md's {name} example")
    assert kinds["walk"] and kinds["diff"], kinds


def test_docs_name_every_key_of_the_hand_built_parts() -> None:
    text = DOCS.read_text(encoding="utf-8")
    names: list[SchemaName] = ["walk", "diff"]
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
