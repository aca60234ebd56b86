"""Issue 19, saved sessions: a hostile or inconsistent `--load` file gets one line, `error: FILE:
... <key path>: <what is wrong>`, and exit 2 from walk, diff and report; never a traceback, an
internal error or a hang.

Each case starts from a session the real tool saved (two_modules) and breaks one thing the way
the issue found it broken: Python's own limits (a 5,000-digit integer, deep nesting, half a
character), records that point at nothing (an empty list of traces, passes, calls or tensors; a
renamed module; a pin past the end of the chain rule; an index out of range; an id given twice;
a hook argument named as no hook of its kind names one) and a huge value echoed in the error.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gradexplain.records.session import session_json
from tests.helpers.capture import captured
from tests.helpers.cli import REPO, Result

Document = dict[str, Any]
COMMANDS = (("walk",), ("diff", "--format", "json"), ("report",))


def run_cli(*args: str, seconds: float = 60) -> Result:
    """The real command line in a subprocess, under a timeout that turns a hang into a failure."""
    done = subprocess.run([sys.executable, "-m", "gradexplain", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=seconds, check=False,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "100"})
    return Result(done.returncode, done.stdout, done.stderr)


def assert_refused(result: Result, path: Path, word: str) -> str:
    """Exit 2, one short line naming the file and `word`, nothing of a crash."""
    assert result.code == 2, result
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[:2000]
    line = lines[0]
    assert line.startswith(f"error: {path}: "), line[:400]
    assert len(line) < 400, line[:400]
    assert word.lower() in line.lower(), line
    return line


@pytest.fixture(scope="module")
def saved() -> Document:
    document: Document = json.loads(json.dumps(session_json(captured("two_modules.yaml"))))
    return document


def _events(document: Document, mode: int = 0) -> list[Any]:
    return list(document["session"]["traces"][mode]["events"])


def _first_pinned(document: Document) -> dict[str, Any]:
    for event in document["session"]["walk"]["passes"][0]["events"]:
        for arg in event["args"]:
            if arg["pin"] is not None:
                return dict(arg["pin"])
    raise AssertionError("two_modules has no pinned argument")


def _set(path: tuple[str | int, ...], value: Any) -> Callable[[Document], None]:
    def change(document: Document) -> None:
        place = document["session"]
        for key in path[:-1]:
            place = place[key]
        place[path[-1]] = value
    return change


def _rename_module(document: Document) -> None:
    for call in document["session"]["traces"][0]["calls"]:
        if call["module"] == "module2":
            call["module"] = "module_two"


def _pin_past_the_chain_rule(document: Document) -> None:
    for event in document["session"]["walk"]["passes"][0]["events"]:
        for arg in event["args"]:
            if arg["pin"] is not None:
                arg["pin"]["line"] = 40
                return


def _label_names_no_module(document: Document) -> None:
    for event in document["session"]["walk"]["passes"][1]["events"]:
        if event["hook"] == "full_backward":
            event["target"] = "nowhere"
            return


def _rename_argument(where: str, hook: str, name: str) -> Callable[[Document], None]:
    """The first argument of the first `hook` event in the walk's passes or the traces."""
    def change(document: Document) -> None:
        session = document["session"]
        lists = session["walk"]["passes"] if where == "walk" else session["traces"]
        for event in (event for item in lists for event in item["events"]):
            if event["hook"] == hook and event["args"]:
                event["args"][0]["name"] = name
                return
        raise AssertionError(f"two_modules has no {hook} event with arguments")
    return change


def _duplicate_node_id(document: Document) -> None:
    graph = document["session"]["traces"][0]["graph"]
    graph[1]["id"] = graph[0]["id"]


# name: (what to do to the saved session, a key word the error must hold)
CASES: dict[str, tuple[Callable[[Document], None], str]] = {
    "empty_traces": (_set(("traces",), []), "traces"),
    "empty_passes": (_set(("walk", "passes"), []), "passes"),
    "empty_calls": (_set(("traces", 1, "calls"), []), "module calls"),
    "empty_tensors": (_set(("traces", 0, "tensors"), []), "tensor"),
    "renamed_module": (_rename_module, "module"),
    "pin_past_the_chain_rule": (_pin_past_the_chain_rule, "pin.line"),
    "label_on_no_module": (_label_names_no_module, "nowhere"),
    "argument_index_out_of_range": (_set(("traces", 0, "calls", 0, "inputs", 0), 57), "57"),
    "duplicate_node_id": (_duplicate_node_id, "twice"),
    "run_number_out_of_range": (_set(("walk", "passes", 0, "events", 0, "run"), 9), "run"),
    "argument_name_empty": (_rename_argument("walk", "backward", ""), "args[0].name"),
    "argument_name_of_another_hook": (_rename_argument("trace", "full_backward", "grad"),
                                      "args[0].name"),
    "argument_position_not_a_number": (_rename_argument("walk", "full_backward",
                                                        "grad_output[x]"), "grad_output[x]"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_inconsistent_session_is_refused_with_its_key_path(
        case: str, saved: Document, tmp_path: Path) -> None:
    change, word = CASES[case]
    document = copy.deepcopy(saved)
    change(document)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    command = COMMANDS[sorted(CASES).index(case) % len(COMMANDS)]
    line = assert_refused(run_cli(command[0], "--load", str(path), *command[1:]), path, word)
    assert "not a usable gradexplain session" in line


def test_the_cases_break_a_session_that_loads(saved: Document, tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(saved), encoding="utf-8")
    for command in COMMANDS:
        result = run_cli(command[0], "--load", str(path), *command[1:])
        assert result.code == 0, result.stderr
    assert _first_pinned(saved)["line"] < 40


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hostile.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_five_thousand_digit_number_is_refused_with_its_key_path(
        saved: Document, tmp_path: Path) -> None:
    text = json.dumps(saved).replace('"seq": 0,', f'"seq": {"7" * 5000},', 1)
    assert "7" * 5000 in text
    path = _write(tmp_path, text)
    for command in COMMANDS:
        line = assert_refused(run_cli(command[0], "--load", str(path)), path, "digits")
        assert "seq" in line and "7777" not in line


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_deep_nesting_is_refused_before_it_is_parsed(opening: str, tmp_path: Path) -> None:
    closing = "]" if opening == "[" else "}"
    for depth, closed in ((100_000, True), (1_000_000, False), (65, True)):
        nested = opening * depth + "0" + (closing * depth if closed else "")
        path = _write(tmp_path, '{"schema": "gradexplain.session/2", "session": ' + nested + "}")
        assert_refused(run_cli("walk", "--load", str(path), seconds=30), path, "nested")


@pytest.mark.parametrize("inside", ['a\\"', '\\"', '[\\"{'])
def test_an_unclosed_string_of_escaped_quotes_is_refused_in_linear_time(
        inside: str, tmp_path: Path) -> None:
    # The nesting scan once retried its string pattern from every quote of an unclosed string:
    # 30 KB took 12 s, so 1 MB ran for most of an hour. The timeout is the guard.
    text = '{"schema": "' + inside * (1_000_000 // len(inside))
    path = _write(tmp_path, text)
    assert_refused(run_cli("walk", "--load", str(path), seconds=30), path, "not JSON")


def test_a_whole_character_written_as_two_escapes_still_loads(
        saved: Document, tmp_path: Path) -> None:
    document = copy.deepcopy(saved)
    document["session"]["walk"]["spec"] = "two \U0001f600 modules.yaml"
    path = _write(tmp_path, json.dumps(document))
    result = run_cli("walk", "--load", str(path), "--format", "json")
    assert result.code == 0, result.stderr
    shown = json.dumps(json.loads(result.stdout), ensure_ascii=False)
    assert "two \U0001f600 modules.yaml" in shown


def test_a_huge_schema_string_is_not_echoed_whole(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"schema": "x" * 5_000_000, "session": {}}))
    assert_refused(run_cli("report", "--load", str(path)), path, "schema")


@pytest.mark.parametrize("where", ["mode", "unknown_key", "node_id"])
def test_a_huge_value_inside_the_session_is_not_echoed_whole(
        where: str, saved: Document, tmp_path: Path) -> None:
    document = copy.deepcopy(saved)
    trace = document["session"]["traces"][0]
    huge = "m" * 1_000_000
    if where == "mode":
        trace["mode"] = huge
    elif where == "unknown_key":
        trace["tensors"][0][huge] = 1
    else:
        node = next(node for node in trace["graph"] if node["next"])
        node["next"][0][0] = huge
    path = _write(tmp_path, json.dumps(document))
    line = assert_refused(run_cli("diff", "--load", str(path)), path, "traces")
    assert "mmmm" in line  # quoted, but cut short (assert_refused bounds the line)
