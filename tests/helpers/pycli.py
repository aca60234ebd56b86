"""The command line of the Python-model tests (tests/capture/test_pymodel_*.py).

The command line runs in-process through `gradexplain.cli.main` (the real entry point, errors
and exit codes included) to keep the tests fast: `in_process` is what their `cli` fixture
returns. A handful of runs that only a separate process can show (byte-identical output across
processes, the console script finding `tests.helpers.pymodels` from the working directory, no
traceback on stderr) run as real subprocesses, side by side: `Background`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from gradexplain.cli import main
from tests.helpers.cli import REPO, Result

PYMODELS = "tests/helpers/pymodels.py"
JSON = dict[str, Any]
CLI = Callable[..., Result]


def in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    """Run `gradexplain ARGS` in this process, from the repository root, through the real entry
    point (`main`: errors become `error: ...` and an exit code exactly as in a shell). For a
    test file's `cli` fixture, which hands over its own capsys and monkeypatch."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")

    def run(*args: str) -> Result:
        monkeypatch.setattr(sys, "argv", ["gradexplain", *args])
        capsys.readouterr()
        code: int = 0
        try:
            main()
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else int(done.code is not None)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def run_separately(*args: str, env: dict[str, str] | None = None,
                   cwd: Path | None = None) -> Result:
    """`python -m gradexplain ARGS` in a process of its own, this tree first on the path: for
    what only a process shows (its exit code, its file descriptors, its signals, no
    traceback). It runs in `cwd` (None: the repository)."""
    done = subprocess.run(
        [sys.executable, "-m", "gradexplain", *args], capture_output=True, text=True,
        cwd=cwd or REPO,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "100", "PYTHONPATH": str(REPO),
             **(env or {})},
        timeout=300, check=False)
    return Result(done.returncode, done.stdout, done.stderr)


def assert_one_model_error_line(result: Result, file: str, *words: str,
                                warnings_before: bool = False) -> str:
    """Exit 2, nothing on stdout, one `error:` line naming `file` (and `words`), no traceback
    and no internal error; with `warnings_before`, the warnings Python showed before it (a
    model calling a deprecated torch API) may stand on stderr too."""
    assert result.code == 2, (result.code, result.stderr[-2000:])
    assert result.stdout == ""
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    lines = result.stderr.splitlines()
    if warnings_before:
        lines = [line for line in lines if line.startswith("error:")]
    assert len(lines) == 1, result.stderr[-2000:]
    line = lines[0]
    assert line.startswith("error: ") and file in line, line
    for word in words:
        assert word in line, (word, line)
    return line


def walk_json(cli: CLI, *args: str) -> JSON:
    result = cli("walk", *args, "-f", "json")
    assert result.code == 0, result.stderr
    doc: JSON = json.loads(result.stdout)
    return doc


def json_event(doc: JSON, hook: str, target: str) -> JSON:
    """The one `hook` event on `target` in the legacy pass of a walk document."""
    found = [item for item in doc["passes"][0]["events"]
             if item["hook"] == hook and item["target"] == target]
    assert len(found) == 1, (hook, target, len(found))
    item: JSON = found[0]
    return item


def without_spec(doc: JSON) -> JSON:
    return {key: value for key, value in doc.items() if key != "spec"}


class Background:
    """Commands that need a process of their own, started together when the file's first test
    starts and running while the in-process tests run; `result` waits for one. A test file
    starts only the commands it reads (`names`), through `started`."""

    def __init__(self, *names: str) -> None:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
        module_form = ("walk", "tests.helpers.pymodels:make_mlp", "--input", "4x3", "-f", "json")
        commands = {
            # the console script does not have the working directory on sys.path
            "script": ["gradexplain", *module_form],
            "module": [sys.executable, "-m", "gradexplain", *module_form],
            "forward_raises": [sys.executable, "-m", "gradexplain", "walk",
                               f"{PYMODELS}:make_mlp", "--input", "4x5"],
            # the package's lazy `explain` in a fresh interpreter, before anything else loaded
            "import": [sys.executable, "-c", "from gradexplain import Explanation, explain\n"
                       "print(explain.__module__, explain.__name__, Explanation.__module__)"],
        }
        assert set(names) <= set(commands), sorted(set(names) - set(commands))
        self.processes = {
            name: subprocess.Popen(commands[name], cwd=REPO, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for name in names}
        self.results: dict[str, Result] = {}

    def result(self, name: str) -> Result:
        if name not in self.results:
            process = self.processes[name]
            out, err = process.communicate(timeout=120)
            self.results[name] = Result(process.returncode, out, err)
        return self.results[name]

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()


def started(*names: str) -> Iterator[Background]:
    """The body of a module-scoped autouse `processes` fixture: `names` started before the
    file's first test, killed after its last if still running."""
    background = Background(*names)
    yield background
    background.stop()


def assert_one_error_line(result: Result, says: Sequence[str]) -> None:
    assert result.code == 2, (result.code, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in says:
        assert fragment in lines[0]
