"""A saved session that loads renders whole (issue 19): real sessions, mutated as data in many
small ways (tests/helpers/sessionmutations.py), each either refused on load with one line naming
the file and exit 2, or rendered by walk (text, JSON, markdown, --timeline, --order), diff (text,
JSON, markdown) and report with exit 0 or 1. Never an internal error or a traceback.

The sessions are saved from two_modules, a residual block (a tensor used twice, one use through a
layer) and a Python model with two inputs (tests/helpers/pymodels.py:make_two_inputs); the
mutations are seeded, so every run tries the same cases. Each command runs through
`gradexplain.cli.main` in this process.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from gradexplain.capture.pipeline import capture_target
from gradexplain.cli import main
from gradexplain.errors import SessionError
from gradexplain.records.session import decode_session, session_json
from tests.helpers.capture import capture_text, captured
from tests.helpers.cli import REPO
from tests.helpers.sessionmutations import mutations

RESIDUAL = """\
name: residual
seed: 0
inputs:
  x: {rand: [3], requires_grad: true}
modules:
  block:
    layers:
      l: {Linear: {in_features: 3, out_features: 3}}
    forward: {args: [x], steps: ["h = l(x)", "out = h + x"]}
forward: ["y = block(x)", "z = sum(y * y)"]
backward: z
"""

PYMODELS = REPO / "tests" / "helpers" / "pymodels.py"
COMMANDS = (("walk",), ("walk", "--format", "json"), ("walk", "--format", "markdown"),
            ("walk", "--timeline"), ("walk", "--order"), ("diff",), ("diff", "--format", "json"),
            ("diff", "--format", "markdown"), ("report",))
CASES_PER_SESSION = 25


@functools.cache
def saved(name: str) -> str:
    """A session the tool captured, as the JSON text `walk --save` writes."""
    if name == "two_modules":
        session = captured("two_modules.yaml")
    elif name == "residual":
        session = capture_text(RESIDUAL, "residual.yaml")
    else:
        session = capture_target(f"{PYMODELS}:make_two_inputs", ["1x3", "1x5"], None, "sum", 4)
    return json.dumps(session_json(session))


def run(*args: str) -> tuple[int, str, str]:
    """`gradexplain ARGS` through main() in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    saved_argv, sys.argv = sys.argv, ["gradexplain", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else int(done.code is not None)
    finally:
        sys.argv = saved_argv
    return code, out.getvalue(), err.getvalue()


def check_refusal(path: Path, stderr: str, story: str) -> None:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), (story, stderr[:800])
    assert len(lines[0]) < 400, (story, lines[0][:400])


@pytest.mark.parametrize("name", ["two_modules", "residual", "two_inputs"])
def test_the_saved_session_passes_the_checks(name: str) -> None:
    assert decode_session(saved(name), "run.json") is not None


@pytest.mark.parametrize("name", ["two_modules", "residual", "two_inputs"])
def test_a_mutated_session_is_refused_or_renders_whole(name: str, tmp_path: Path) -> None:
    document: Any = json.loads(saved(name))
    path = tmp_path / "run.json"
    outcomes = {"refused": 0, "rendered": 0}
    for story, mutated in mutations(document, random.Random(name), CASES_PER_SESSION):
        path.write_text(json.dumps(mutated), encoding="utf-8")
        for command in COMMANDS:
            code, stdout, stderr = run(command[0], "--load", str(path), *command[1:])
            assert "internal error" not in stderr and "Traceback" not in stderr, (
                story, command, stderr[:2000])
            assert code in (0, 1, 2), (story, command, code)
            if code == 2:
                # Refused on load: the same for every command.
                check_refusal(path, stderr, story)
                outcomes["refused"] += 1
                break
            if command[1:] == ("--format", "json"):
                json.loads(stdout)
        else:
            outcomes["rendered"] += 1
    # Both kinds of case were tried: the mutations neither all break the file nor all miss.
    assert outcomes["refused"] and outcomes["rendered"], outcomes


def _first_argument_of_each_hook(document: Any) -> dict[tuple[str, str], list[str | int]]:
    """(where, hook kind) -> the key path of the first argument of such an event, in the walk's
    passes and in the traces."""
    found: dict[tuple[str, str], list[str | int]] = {}
    session = document["session"]
    for where, key in (("walk", ("walk", "passes")), ("trace", ("traces",))):
        lists = session[key[0]][key[1]] if len(key) == 2 else session[key[0]]
        for number, events in enumerate(item["events"] for item in lists):
            for place, event in enumerate(events):
                if event["args"]:
                    found.setdefault((where, event["hook"]),
                                     [*key, number, "events", place, "args", 0, "name"])
    return found


BAD_NAMES = ("", "x", "grad_input[x]", "grad_input[01]", "grad_input[-1]", "grad_input[0",
             "grad_input[" + "9" * 5000 + "]", "output[0] ", "a" * 150)


@pytest.mark.parametrize("name", ["two_modules", "residual", "two_inputs"])
def test_an_argument_named_as_no_hook_of_its_kind_names_it_is_refused_at_its_key_path(
        name: str) -> None:
    document: Any = json.loads(saved(name))
    places = _first_argument_of_each_hook(document)
    if name == "two_modules":  # module, node and tensor hooks, legacy and full
        assert {hook for _, hook in places} >= {"forward", "backward", "full_backward", "node",
                                                "tensor"}
    for number, ((_, hook), path) in enumerate(sorted(places.items())):
        # Two of the bad names per place, in turn (a decode takes a while), and another hook
        # kind's own name, no better than junk.
        other = "grad" if hook != "tensor" else "grad_input[0]"
        for bad in (BAD_NAMES[number % len(BAD_NAMES)],
                    BAD_NAMES[(number + 1) % len(BAD_NAMES)], other):
            mutated = json.loads(saved(name))
            arg = mutated["session"]
            for key in path[:-1]:
                arg = arg[key]
            arg["name"] = bad
            with pytest.raises(SessionError) as refused:
                decode_session(json.dumps(mutated), "run.json")
            where = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path)
            assert f"at session{where}:" in str(refused.value), (hook, bad, str(refused.value))
            assert len(str(refused.value)) < 400


@pytest.mark.parametrize("renamed", ["grad_input[5]", "grad_output", "grad_input"])
def test_a_backward_hook_argument_renamed_within_its_kind_renders_whole(
        renamed: str, tmp_path: Path) -> None:
    # Every argument of one backward event under the same name: a user's hook records a lone
    # value by its prefix alone, and diff pairs arguments by name and position.
    document: Any = json.loads(saved("two_modules"))
    path = tmp_path / "run.json"
    for where, hook in (("walk", "backward"), ("walk", "full_backward")):
        mutated = json.loads(saved("two_modules"))
        event_path = _first_argument_of_each_hook(document)[(where, hook)][:-3]
        event = mutated["session"]
        for key in event_path:
            event = event[key]
        for arg in event["args"]:
            arg["name"] = renamed
        path.write_text(json.dumps(mutated), encoding="utf-8")
        for command in COMMANDS:
            code, _, stderr = run(command[0], "--load", str(path), *command[1:])
            assert code in (0, 1) and not stderr.strip(), (hook, command, stderr[:800])


def _first_value(document: Any) -> tuple[list[str | int], dict[str, Any]]:
    """The key path of the first recorded tensor value with values (not a summary), and it."""
    def walk(data: Any, path: list[str | int]) -> tuple[list[str | int], dict[str, Any]] | None:
        if isinstance(data, dict):
            if {"shape", "dtype", "value"} <= set(data) and data["value"] is not None \
                    and data["shape"]:
                return path, data
            items: list[tuple[str | int, Any]] = list(data.items())
        elif isinstance(data, list):
            items = list(enumerate(data))
        else:
            return None
        for key, item in items:
            found = walk(item, [*path, key])
            if found is not None:
                return found
        return None

    found = walk(document["session"], [])
    assert found is not None
    return found


@pytest.mark.parametrize(("edit", "said"), [
    (lambda value: value.update(value=5.0), "do not fit the shape"),
    (lambda value: value.update(shape=[*value["shape"], 7]), "do not fit the shape"),
    (lambda value: value.update(value=[[1.0, [2.0]], 3.0]), "do not fit the shape"),
    (lambda value: value.update(value=None, summary=None), "neither values nor a summary"),
    (lambda value: value.update(value=True, shape=[]), "do not fit the shape"),
    (lambda value: value.update(shape=[100000, 100000]), "do not fit the shape"),
])
def test_a_value_that_contradicts_its_shape_is_refused_at_its_key_path(
        edit: Any, said: str) -> None:
    """A hand-edited value whose numbers do not fit its shape (`{"shape": [3, 3], "value":
    5.0}`) was rendered as it stood; it is refused, naming where."""
    document: Any = json.loads(saved("two_modules"))
    path, value = _first_value(document)
    edit(value)
    with pytest.raises(SessionError) as refused:
        decode_session(json.dumps(document), "run.json")
    assert said in str(refused.value)
    assert "at session" + "".join(f"[{key}]" if isinstance(key, int) else f".{key}"
                                  for key in path) in str(refused.value)


def test_bool_values_of_a_bool_tensor_load() -> None:
    """A mask's values are true and false (torch's tolist): they fit a bool tensor's shape."""
    document: Any = json.loads(saved("two_modules"))
    _, value = _first_value(document)
    value.update(dtype="bool", shape=[2], value=[True, False])
    assert decode_session(json.dumps(document), "run.json") is not None


@pytest.mark.parametrize("key", ["legacy_output", "keywords"])
def test_a_module_calls_new_tensor_indices_are_checked(key: str) -> None:
    """`legacy_output` and `keywords` point at tensors of the trace, as its other indices do:
    out of range, refused at their key path, where diff would have failed on them."""
    document: Any = json.loads(saved("two_modules"))
    call = document["session"]["traces"][0]["calls"][0]
    call[key] = 999 if key == "legacy_output" else [["scale", 999]]
    with pytest.raises(SessionError) as refused:
        decode_session(json.dumps(document), "run.json")
    assert f"calls[0].{key}" in str(refused.value)
