"""torch runs a capture with one intra-op thread unless told otherwise (`--threads N`,
`explain(threads=N)`), and the caller's setting is back afterwards; the environment's thread
settings change no byte of the output.

The model here reads torch's thread count in its own forward, so the count the capture really
ran with is seen from the inside, not inferred from timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from torch import nn

from gradexplain.api import explain
from gradexplain.capture import pipeline as derive
from gradexplain.cli import main
from gradexplain.errors import ModelRunError, UsageError
from tests.helpers.cli import REPO

PROBE_FILE = '''
import torch
from torch import nn


class Probe(nn.Module):
    """Multiplies by the number of threads torch computes with: d(sum)/dx is that number."""

    def forward(self, x):
        return x * torch.get_num_threads()


def make():
    return Probe()
'''


class Probe(nn.Module):
    """Records torch's thread count at every forward (a class attribute: explain() runs deep
    copies, which share it)."""

    seen: ClassVar[list[int]] = []

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.fail = fail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Probe.seen.append(torch.get_num_threads())
        if self.fail:
            raise ValueError("probe told to fail")
        result: torch.Tensor = self.linear(x)
        return result


@pytest.fixture
def callers_threads() -> Iterator[int]:
    """The test's caller has set 2 threads (whatever the machine's default); put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    Probe.seen.clear()
    try:
        yield 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads, inside", [("default", 1), (None, 2), (3, 3)])
def test_explain_runs_with_its_threads_and_restores_the_callers(
        callers_threads: int, threads: int | str | None, inside: int) -> None:
    if threads == "default":
        result = explain(Probe(), (4, 3))
    else:
        assert not isinstance(threads, str)
        result = explain(Probe(), (4, 3), threads=threads)
    assert not result.failures()
    assert Probe.seen and set(Probe.seen) == {inside}
    assert torch.get_num_threads() == callers_threads


def test_the_callers_threads_come_back_when_the_model_fails(callers_threads: int) -> None:
    with pytest.raises(ModelRunError):
        explain(Probe(fail=True), (4, 3))
    assert Probe.seen == [1]
    assert torch.get_num_threads() == callers_threads


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2", 10**6])
def test_explain_refuses_a_thread_count_that_is_not_one(threads: object) -> None:
    with pytest.raises(UsageError, match=r"threads="):
        explain(Probe(), (4, 3), threads=threads)  # type: ignore[arg-type]


def _walk_yaml(monkeypatch: pytest.MonkeyPatch, *options: str) -> list[int]:
    """Run `gradexplain walk specs/two_modules.yaml OPTIONS` in this process and return the
    thread counts torch had while the walk ran (seen from inside the capture)."""
    seen: list[int] = []
    original = derive._walk

    def watched(*args: object, **kwargs: object) -> object:
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(derive, "_walk", watched)
    monkeypatch.setattr(sys, "argv", ["gradexplain", "walk", "specs/two_modules.yaml",
                                      "--format", "json", *options])
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code in (0, None)
    return seen


@pytest.mark.parametrize("options, inside", [((), 1), (("--threads", "3"), 3)])
def test_walk_of_a_spec_runs_with_its_threads(
        monkeypatch: pytest.MonkeyPatch, callers_threads: int, capsys: pytest.CaptureFixture[str],
        options: tuple[str, ...], inside: int) -> None:
    assert _walk_yaml(monkeypatch, *options) == [inside]
    assert json.loads(capsys.readouterr().out)["schema"] == "gradexplain.walk/1"
    assert torch.get_num_threads() == callers_threads


def _walk_probe(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> str:
    (tmp_path / "probe.py").write_text(PROBE_FILE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "gradexplain", "walk", f"{tmp_path / 'probe.py'}:make",
         "--input", "2x3", "--format", "json", *options],
        cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True,
        timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_command_line_uses_one_thread_whatever_the_environment_says(
        tmp_path: Path) -> None:
    """OMP_NUM_THREADS=2 would give torch two threads; the walk runs with one, and prints the
    same bytes as under OMP_NUM_THREADS=1."""
    two = _walk_probe(tmp_path, env={"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"})
    one = _walk_probe(tmp_path, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    assert two == one
    grads = json.loads(two)["passes"][0]["grads"]
    assert grads["x"] == [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]


def test_threads_option_reaches_torch(tmp_path: Path) -> None:
    grads = json.loads(_walk_probe(tmp_path, "--threads", "2"))["passes"][0]["grads"]
    assert grads["x"] == [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]


@pytest.mark.parametrize("options, says", [
    (("walk", "specs/two_modules.yaml", "--threads", "0"), "--threads"),
    (("walk", "specs/two_modules.yaml", "--threads", "two"), "--threads"),
    (("diff", "specs/two_modules.yaml", "--threads", "100000"), "--threads"),
    (("walk", "--load", "run.json", "--threads", "2"), "leave out --threads"),
])
def test_a_bad_thread_count_is_a_usage_error(options: tuple[str, ...], says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "gradexplain", *options], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout
    assert says in done.stderr and "Traceback" not in done.stderr
