"""JSON written as it is made (render/json_stream.py): the streamed text is the built document's,
compact or `--pretty` (json.dumps's own indent=1 layout, byte for byte), and parses to the same
data either way; a non-finite value still becomes null, checked once per tensor."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import LabelledArg
from gradexplain.render.json_stream import Fields, Items, batched, built, json_chunks, json_text
from gradexplain.render.json_walk import arg_json, walk_document, walk_json
from tests.helpers.capture import captured
from tests.helpers.cli import run_cli

SCALARS = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(
    allow_nan=False, allow_infinity=False) | st.text(max_size=8)


def _lazy(data: Any, draw: st.DrawFn) -> Any:
    """`data` with some of its dicts made Fields and some of its lists Items, as walk does:
    only where all around them is (inside plain data, everything is encoded whole)."""
    if isinstance(data, dict) and draw(st.booleans()):
        return Fields({key: _lazy(value, draw) for key, value in data.items()})
    if isinstance(data, list) and draw(st.booleans()):
        return Items(iter([_lazy(value, draw) for value in data]))
    return data


@st.composite
def documents(draw: st.DrawFn) -> tuple[Any, Any]:
    """(a plain JSON document, the same made partly lazy)."""
    data = draw(st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                             | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                             max_leaves=30))
    return data, _lazy(data, draw)


@given(documents(), st.booleans())
def test_streamed_text_is_json_dumps_of_the_built_document(case: tuple[Any, Any],
                                                           pretty: bool) -> None:
    data, lazy = case
    expected = (json.dumps(data, ensure_ascii=False, indent=1) if pretty
                else json.dumps(data, ensure_ascii=False, separators=(",", ":"))) + "\n"
    assert json_text(lazy, pretty) == expected


@given(documents())
def test_built_equals_the_plain_document(case: tuple[Any, Any]) -> None:
    data, lazy = case
    assert built(lazy) == data


def test_empty_streamed_arrays_and_objects_read_as_json_dumps_writes_them() -> None:
    document = Fields({"a": Items(iter(())), "b": Fields(), "c": Items(iter([Fields()]))})
    data: dict[str, Any] = {"a": [], "b": {}, "c": [{}]}
    assert json_text(document, True) == json.dumps(data, indent=1) + "\n"
    document = Fields({"a": Items(iter(())), "b": Fields(), "c": Items(iter([Fields()]))})
    assert json_text(document) == '{"a":[],"b":{},"c":[{}]}\n'


def test_batched_pieces_join_to_the_same_text() -> None:
    chunks = [str(number) * (number % 7) for number in range(500)]
    pieces = list(batched(iter(chunks), size=100))
    assert "".join(pieces) == "".join(chunks)
    assert all(len(piece) < 100 + max(map(len, chunks)) for piece in pieces)


@pytest.mark.parametrize("spec", ["two_modules.yaml", "cnn_hooks.yaml", "second_backward.yaml"])
def test_walk_streamed_is_walk_built(spec: str) -> None:
    walk = captured(spec).walk
    for pretty in (False, True):
        streamed = "".join(json_chunks(walk_document(walk), pretty))
        assert json.loads(streamed) == walk_json(walk)
    assert "".join(json_chunks(walk_document(walk), True)) == json.dumps(
        walk_json(walk), ensure_ascii=False, indent=1) + "\n"


def test_a_non_finite_number_is_null_and_the_rest_kept() -> None:
    value = TensorValue((2, 2), "float32", [[1.0, math.inf], [-math.inf, math.nan]])
    assert arg_json(LabelledArg("grad", value, None, None))["value"] == [[1.0, None],
                                                                          [None, None]]
    # A finite sum over infinities that cancel is not taken for finite: nan is no number.
    value = TensorValue((2,), "float32", [math.inf, -math.inf])
    assert arg_json(LabelledArg("grad", value, None, None))["value"] == [None, None]
    # Too large to add up as floats, but every one finite: kept as they are.
    value = TensorValue((2,), "float32", [1.7e308, 1.7e308])
    assert arg_json(LabelledArg("grad", value, None, None))["value"] == [1.7e308, 1.7e308]
    value = TensorValue((), "int64", 10**400)
    assert arg_json(LabelledArg("n", value, None, None))["value"] == 10**400


def test_pretty_prints_the_same_document_as_compact() -> None:
    compact = run_cli("walk", "specs/two_modules.yaml", "--format", "json")
    pretty = run_cli("walk", "specs/two_modules.yaml", "--format", "json", "--pretty")
    assert compact.code == pretty.code == 0, compact.stderr + pretty.stderr
    assert json.loads(compact.stdout) == json.loads(pretty.stdout)
    assert compact.stdout.count("\n") == 1 and compact.stdout.endswith("}\n")
    assert pretty.stdout.startswith('{\n "schema": "gradexplain.walk/1",\n')
    compact = run_cli("diff", "specs/two_modules.yaml", "--format", "json")
    pretty = run_cli("diff", "specs/two_modules.yaml", "--format", "json", "--pretty")
    assert json.loads(compact.stdout) == json.loads(pretty.stdout)
    assert len(compact.stdout) < len(pretty.stdout)
