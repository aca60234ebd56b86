"""The garbage collector during a command (`collector.pause_collection`): off while the command
starts, on again when the run begins, with start-up's objects frozen out of its way (the capture
pauses it itself while it runs: `capture.pipeline`), the run's session frozen after it; and
untouched when `cli.main` runs inside another program."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import REPO
from tests.helpers.pycli import CLI, in_process, run_separately

# A Python model that writes down, as its forward runs, how many objects the collector has frozen.
MODEL = '''
import gc
import os

from torch import nn


class Probe(nn.Linear):
    def forward(self, x):
        with open(os.environ["GC_PROBE"], "w") as out:
            out.write(str(gc.get_freeze_count()))
        return super().forward(x)


def make():
    return Probe(3, 2)
'''


def test_a_model_runs_with_start_up_frozen(tmp_path: Path) -> None:
    model = tmp_path / "probe.py"
    model.write_text(MODEL, encoding="utf-8")
    seen = tmp_path / "seen.txt"
    result = run_separately("walk", f"{model}:make", "--input", "4x3", "--format", "json",
                            env={"GC_PROBE": str(seen)})
    assert result.code == 0, result.stderr
    # What start-up made (torch's modules) is frozen: many objects, not a handful.
    assert int(seen.read_text(encoding="utf-8")) > 100_000


def test_start_up_runs_with_the_collector_off() -> None:
    code = ("import gc\n"
            "from gradexplain.collector import pause_collection, resume_collection\n"
            "pause_collection()\n"
            "print(gc.isenabled(), gc.get_freeze_count() == 0)\n"
            "resume_collection()\n"
            "print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
            "gc.disable()\n"
            "resume_collection()\n"  # once only: a second call leaves the collector alone
            "print(gc.isenabled())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120, check=True)
    assert done.stdout.split("\n") == ["False True", "True True", "False", ""]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    return in_process(capsys, monkeypatch)


def test_main_in_another_program_leaves_the_collector_alone(cli: CLI) -> None:
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    assert cli("walk", "specs/two_modules.yaml", "--format", "json").code == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_what_the_run_made_is_frozen_after_it_in_the_command_only() -> None:
    """`freeze_survivors`: in the command's own process (after `pause_collection`) the session
    the run made joins what is frozen; anywhere else it freezes nothing."""
    code = ("import gc\n"
            "from gradexplain.collector import (freeze_survivors, pause_collection,\n"
            "                                   resume_collection)\n"
            "freeze_survivors()\n"
            "print(gc.get_freeze_count() == 0)\n"
            "pause_collection()\n"
            "resume_collection()\n"
            "before = gc.get_freeze_count()\n"
            "session = [[index] for index in range(50_000)]\n"
            "freeze_survivors()\n"
            "print(gc.get_freeze_count() - before >= 50_000, gc.isenabled())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120, check=True)
    assert done.stdout.split("\n") == ["True", "True True", ""]
