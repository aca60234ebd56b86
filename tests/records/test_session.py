"""Capture once, render many: a session saved as JSON loads back equal, and bad files are
refused with one clear line (exit 2), never a traceback."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gradexplain.errors import SessionError
from gradexplain.records.codec import DecodeError, from_data, to_data
from gradexplain.records.session import SCHEMA, Session, load_session, save_session
from gradexplain.records.trace import Summary, TensorValue
from gradexplain.records.walk import Check
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS


@pytest.mark.parametrize("spec", sorted(path.name for path in SPECS.glob("*.yaml")))
def test_a_saved_session_loads_back_equal(spec: str, tmp_path: Path) -> None:
    session = captured(spec)
    path = tmp_path / "run.json"
    save_session(session, path)
    assert load_session(path) == session


def test_the_session_keeps_what_the_spec_and_the_forward_said() -> None:
    session = captured("two_modules.yaml")
    assert session.spec_text == (SPECS / "two_modules.yaml").read_text(encoding="utf-8")
    assert session.inputs == ("x",)
    steps = {step.targets: step for step in session.forward}
    assert steps[("module2.t",)].calls == "module2.l"
    assert steps[("module2.t",)].operands == ("module2.x",)
    assert steps[("module.y",)].operands == ("module.p", "module.x")
    assert steps[("z",)].calls == "module2" and steps[("z",)].operands == ("y",)
    legacy = session.trace("legacy")
    assert legacy is not None
    record = legacy.named("module2.t")
    assert record is not None and record.value is not None
    assert record.value.shape == (1,)


def test_floats_json_cannot_hold_travel_as_text() -> None:
    check = Check(False, math.inf, TensorValue((2,), "float32", [math.nan, -math.inf]))
    data = to_data(check)
    assert data["max_abs_err"] == "inf"
    assert data["expected"]["value"] == ["nan", "-inf"]
    json.dumps(data, allow_nan=False)  # strict JSON
    back = from_data(Check, json.loads(json.dumps(data)))
    assert back.max_abs_err == math.inf
    assert back.expected is not None and isinstance(back.expected.value, list)
    first, second = back.expected.value
    assert isinstance(first, float) and math.isnan(first) and second == -math.inf


def test_decoding_names_the_key_path_of_what_does_not_fit() -> None:
    data = to_data(TensorValue((2,), "float32", None, Summary(0.0, 1.0, 0.5, 1.0)))
    data["summary"]["max"] = "big"
    with pytest.raises(DecodeError) as caught:
        from_data(TensorValue, data)
    assert caught.value.path == ("summary", "max")
    with pytest.raises(DecodeError, match="missing key 'dtype'"):
        from_data(TensorValue, {"shape": [1], "value": 1.0})
    with pytest.raises(DecodeError, match="unknown key 'colour'"):
        from_data(TensorValue, {"shape": [], "dtype": "float32", "value": 1.0, "colour": 1})


def _bad(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SessionError) as caught:
        load_session(path)
    assert caught.value.exit_code == 2
    return caught.value.one_line()


def test_files_that_are_not_sessions_are_refused_with_one_line(tmp_path: Path) -> None:
    assert "not JSON (line 1, column 2" in _bad(tmp_path, "{oops")
    assert "no 'schema' key" in _bad(tmp_path, "[1, 2]")
    assert "schema 'gradexplain.walk/1'" in _bad(tmp_path, '{"schema": "gradexplain.walk/1"}')
    session = json.loads(json.dumps(to_data(captured("two_modules.yaml"))))
    session["walk"]["passes"][0]["events"][3]["seq"] = "seven"
    line = _bad(tmp_path, json.dumps({"schema": SCHEMA, "session": session}))
    assert "at session.walk.passes[0].events[3].seq: expected int, got text" in line
    with pytest.raises(SessionError, match="cannot read it"):
        load_session(tmp_path / "missing.json")


def test_a_session_is_what_its_type_says() -> None:
    assert from_data(Session, to_data(captured("matrix_chain.yaml"))) == captured(
        "matrix_chain.yaml")


def test_save_to_a_place_that_cannot_be_written_is_a_usage_error(tmp_path: Path) -> None:
    from tests.helpers.cli import run_cli

    result = run_cli("walk", "specs/vector_backward.yaml", "--save",
                     str(tmp_path / "missing" / "run.json"), "--format", "json")
    assert result.code == 2
    assert "--save" in result.stderr and "cannot write it" in result.stderr
    assert "Traceback" not in result.stderr
