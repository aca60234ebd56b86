"""The output arrives whole through a real pipe whatever happens to the pipe on the way: a
reader that lags while the process is stopped and continued (Ctrl-Z then `fg`), a pipe that is
non-blocking, a stdout unbuffered (PYTHONUNBUFFERED=1) or not, a terminal encoding that cannot
hold `∂`. The oracle is the same command's output through a plain pipe. And a stderr the
model closed, or a stream the shell closed (`>&-`), takes what was said, not the exit code."""

from __future__ import annotations

import array
import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.helpers.cli import REPO, SPECS, run_cli

# A JSON walk of about 800 KB: many times what a pipe holds, so the writer waits on its reader.
BIG = ("walk", str(SPECS / "cnn_hooks.yaml"), "--format", "json")


def _environment(unbuffered: bool, **more: str) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("PYTHONUNBUFFERED", "PYTHONIOENCODING")}
    if unbuffered:
        environment["PYTHONUNBUFFERED"] = "1"
    return {**environment, "NO_COLOR": "1", **more}


def _held_in_pipe(read_end: int) -> int:
    count = array.array("i", [0])
    fcntl.ioctl(read_end, termios.FIONREAD, count)
    return count[0]


def _start_behind_a_full_pipe(unbuffered: bool, non_blocking: bool) -> tuple[
        subprocess.Popen[bytes], int]:
    """The command writing into a pipe nobody reads yet, returned once the pipe is full and the
    command waits on it (what it holds stopped growing while the command runs on)."""
    read_end, write_end = os.pipe()
    if non_blocking:
        os.set_blocking(write_end, False)
    process = subprocess.Popen([sys.executable, "-m", "gradexplain", *BIG], stdout=write_end,
                               stderr=subprocess.PIPE, cwd=REPO, env=_environment(unbuffered))
    os.close(write_end)
    deadline = time.monotonic() + 100
    held, still_since = -1, time.monotonic()
    while time.monotonic() < deadline and process.poll() is None:
        now = _held_in_pipe(read_end)
        if now != held:
            held, still_since = now, time.monotonic()
        elif held > 0 and time.monotonic() - still_since > 0.5:
            return process, read_end
        time.sleep(0.05)
    raise AssertionError(f"the command never waited on a full pipe (exit {process.poll()})")


def _read_all(process: subprocess.Popen[bytes], read_end: int) -> bytes:
    with os.fdopen(read_end, "rb") as reader:
        output = reader.read()
    assert process.wait(timeout=100) == 0, process.stderr.read() if process.stderr else ""
    return output


@pytest.fixture(scope="module")
def expected() -> object:
    plain = run_cli(*BIG)
    assert plain.code == 0, plain.stderr
    return json.loads(plain.stdout)


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="no job control on this system")
@pytest.mark.parametrize("unbuffered", [True, False], ids=["unbuffered", "buffered"])
def test_stopped_and_continued_behind_a_lagging_reader(expected: object,
                                                       unbuffered: bool) -> None:
    process, read_end = _start_behind_a_full_pipe(unbuffered, non_blocking=False)
    os.kill(process.pid, signal.SIGSTOP)
    time.sleep(0.2)
    os.kill(process.pid, signal.SIGCONT)
    assert json.loads(_read_all(process, read_end)) == expected


@pytest.mark.parametrize("unbuffered", [True, False], ids=["unbuffered", "buffered"])
def test_a_non_blocking_pipe_is_waited_on(expected: object, unbuffered: bool) -> None:
    process, read_end = _start_behind_a_full_pipe(unbuffered, non_blocking=True)
    assert json.loads(_read_all(process, read_end)) == expected


def test_a_latin_1_terminal_gets_json_that_parses_and_text_with_escapes() -> None:
    spec = str(SPECS / "two_modules.yaml")
    latin = _environment(unbuffered=False, PYTHONIOENCODING="latin-1", COLUMNS="100")

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "gradexplain", *args], capture_output=True,
                              cwd=REPO, env=latin, timeout=120, check=False)

    as_json = run("walk", spec, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    plain = run_cli("walk", spec, "--format", "json")
    assert json.loads(as_json.stdout.decode("latin-1")) == json.loads(plain.stdout)
    as_text = run("walk", spec)
    assert as_text.returncode == 0, as_text.stderr
    assert "\\u2202z/\\u2202t" in as_text.stdout.decode("latin-1")


def _on_a_terminal(command: str, **environment: str) -> str:
    """`gradexplain COMMAND specs/two_modules.yaml` with stdout and stderr a pseudo-terminal:
    what it showed there (exit 0 asserted)."""
    terminal, its_end = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "gradexplain", command, str(SPECS / "two_modules.yaml")],
        stdin=subprocess.DEVNULL, stdout=its_end, stderr=its_end, cwd=REPO,
        env=_environment(unbuffered=False, **environment))
    os.close(its_end)
    shown = bytearray()
    while True:
        try:
            piece = os.read(terminal, 65536)
        except OSError:  # EIO: every holder of the terminal's end has closed it
            break
        if not piece:
            break
        shown += piece
    os.close(terminal)
    assert process.wait(timeout=100) == 0, shown.decode("latin-1")
    return shown.decode("latin-1")


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals on this system")
@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_a_terminal_that_cannot_hold_the_symbols_gets_the_text(encoding: str) -> None:
    shown = _on_a_terminal("walk", PYTHONIOENCODING=encoding, COLUMNS="100")
    assert "checks verified" in shown
    assert "internal error" not in shown


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals on this system")
@pytest.mark.parametrize("command", ["walk", "diff"])
def test_a_terminal_of_no_width_gets_the_text(command: str) -> None:
    """COLUMNS=0 made rich lay everything out in no columns: nothing was shown, exit 0."""
    shown = _on_a_terminal(command, COLUMNS="0")
    assert "two_modules" in shown
    assert ("checks verified" if command == "walk" else "verdict") in shown


CLOSES_STDERR = """
import os
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)

    def forward(self, x):
        try:  # each run of the forward: closed by the first
            os.close(2)
        except OSError:
            pass
        if RAISES:
            raise ValueError("refused")
        return self.linear(x)
"""


@pytest.mark.parametrize(("raises", "code"), [(True, 2), (False, 0)])
def test_a_model_that_closes_stderr_still_gets_its_exit_code(tmp_path: Path, raises: bool,
                                                            code: int) -> None:
    model = tmp_path / "model.py"
    model.write_text(f"RAISES = {raises}\n" + CLOSES_STDERR, encoding="utf-8")
    result = run_cli("walk", f"{model}:Model", "--input", "4x3", "--format", "json")
    assert result.code == code
    if code == 0:
        assert json.loads(result.stdout)["passes"]
    else:
        assert result.stdout == ""


@pytest.mark.skipif(not os.path.exists("/bin/sh"), reason="closes streams with a POSIX shell")
@pytest.mark.parametrize(("spec", "closed", "code", "shown_on"), [
    ("two_modules.yaml", "2>&-", 0, "stdout"),
    ("does-not-exist.yaml", "2>&-", 2, None),
    ("two_modules.yaml", ">&-", 0, None),
    ("does-not-exist.yaml", ">&-", 2, "stderr"),
    ("two_modules.yaml", "<&-", 0, "stdout"),
])
def test_a_stream_the_shell_closed(spec: str, closed: str, code: int,
                                   shown_on: str | None) -> None:
    command = f'exec "$0" -m gradexplain walk "$1" {closed}'
    done = subprocess.run(["/bin/sh", "-c", command, sys.executable, str(SPECS / spec)],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
                          env=_environment(unbuffered=False, COLUMNS="100"))
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "internal error" not in done.stdout + done.stderr
    if shown_on == "stdout":
        assert "checks verified" in done.stdout
    if shown_on == "stderr":
        assert done.stderr.startswith("error: ") and done.stdout == ""
    if closed == "2>&-" and code:
        assert done.stdout == ""  # the error line is lost, not moved onto stdout
