"""A session's JSON text parsed within bounds (records/jsontext.py): the nesting scan counts only
real brackets and stops exactly at its limit, broken text is still "not JSON", and long numbers
and half characters are refused with their key path. The parsed values are compared with
Python's own json module, the oracle for what the text says."""

from __future__ import annotations

import json

import pytest

from gradexplain.records import jsontext
from gradexplain.records.jsontext import MAX_DEPTH, MAX_DIGITS, JsonTextError


def nested(depth: int) -> str:
    """`depth` levels: lists inside an object, a number at the bottom."""
    return '{"a": ' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"


def test_nesting_up_to_the_limit_parses_as_json_does() -> None:
    text = nested(MAX_DEPTH)
    assert jsontext.parse(text) == json.loads(text)
    with pytest.raises(JsonTextError, match="nested more than"):
        jsontext.parse(nested(MAX_DEPTH + 1))


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"spec_text": "[" * 5000 + '\\"{' * 100, "x": ["]]]"]})
    assert jsontext.parse(text) == json.loads(text)


@pytest.mark.parametrize("text", ['{"a": [1, 2', '{"a": [1}]', "[" * 10, '{"a": "[[[',
                                  '{"a": "x\\"' + "[" * (MAX_DEPTH + 5)])
def test_broken_shallow_text_is_still_not_json(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        jsontext.parse(text)


def test_numbers_up_to_the_limit_parse_and_longer_ones_name_their_place() -> None:
    fits = f'{{"a": [{"9" * MAX_DIGITS}, -{"9" * MAX_DIGITS}, 1.5e300]}}'
    assert jsontext.parse(fits) == json.loads(fits)
    for number in ("9" * (MAX_DIGITS + 1), "-" + "1" * 5000):
        with pytest.raises(JsonTextError, match="digits") as caught:
            jsontext.parse(f'{{"a": {{"b": [0, {number}]}}}}')
        assert caught.value.path == ("a", "b", 1)


def test_half_a_character_is_kept_as_json_reads_it() -> None:
    # `--save` writes a model's lone surrogate as `\ud800`; loading gives the same text back.
    for text in ('{"walk": {"name": "x\\udc00y"}}', '{"\\ud800": 1}',
                 '{"name": "\\ud83d\\ude00", "escaped": "\\\\ud800"}'):
        assert jsontext.parse(text) == json.loads(text)
