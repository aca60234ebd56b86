"""`gradexplain walk` on the command line: text at 100 columns without colour, JSON filters,
bad options, and exit 1 with a loud line when a check fails."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from gradexplain.records.trace import TensorValue
from tests.helpers.cli import SPECS, run_cli

TWO_MODULES = SPECS / "two_modules.yaml"


def test_cli_text_output_at_100_columns_without_colour() -> None:
    result = run_cli("walk", str(TWO_MODULES))
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert all(line == line.rstrip() for line in lines)
    assert "\x1b[" not in result.stdout
    assert "SigmoidBackward0  g = ∂z/∂z = [1]" in result.stdout
    assert "backward module2 on SigmoidBackward0" not in result.stdout
    assert "checks verified against a hook-free run" in lines[-1]
    timeline = run_cli("walk", str(TWO_MODULES), "--timeline")
    assert timeline.code == 0, timeline.stderr
    assert "backward module2 on SigmoidBackward0" in timeline.stdout
    assert all(len(line) <= 100 for line in timeline.stdout.splitlines())


def test_cli_json_filters_and_bad_options(tmp_path: Path) -> None:
    result = run_cli("walk", str(TWO_MODULES), "--format", "json", "--pass", "legacy",
                     "--hook", "backward")
    assert result.code == 0, result.stderr
    data = json.loads(result.stdout)
    (legacy,) = data["passes"]
    assert [event["target"] for event in legacy["events"]] == [
        "module2.activation", "module2", "", "module2.l", "module"]
    bad = run_cli("walk", str(TWO_MODULES), "--module", "nowhere")
    assert bad.code == 2 and "no such module" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_cli("walk", str(tmp_path / "none.yaml"))
    assert missing.code == 2 and "Traceback" not in missing.stderr


def test_cli_exit_1_and_a_loud_line_when_a_check_fails(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A failed check is never hidden: exit 1 and a line naming it."""
    import gradexplain.capture.checks as checks_module
    from gradexplain import cli

    real_check: Callable[..., object] = checks_module.check

    def pessimist(value: TensorValue | None, expected: torch.Tensor) -> object:
        return real_check(value, expected + 1.0)

    for stage in ("gradexplain.capture.passes", "gradexplain.capture.derive"):
        monkeypatch.setattr(f"{stage}.check", pessimist)
    monkeypatch.setattr("sys.argv", ["gradexplain", "walk", str(TWO_MODULES)])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "checks FAILED" in out and "✗" in out
