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
