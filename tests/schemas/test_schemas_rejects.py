"""The schemas can fail: broken documents are rejected, and the session schema accepts what
`walk --load` reads and refuses what it refuses.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gradexplain.records.codec import DecodeError, from_data
from gradexplain.records.session import Session
from tests.helpers.schemacheck import (
    CONTRACT_KEYS,
    JSON,
    KeyPath,
    assert_invalid,
    at,
    first,
    problem,
    spec_documents,
)


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
