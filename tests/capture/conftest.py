"""Fixtures the capture tests share: `cli`, the command line run in-process through
`gradexplain.cli.main` (tests/helpers/pycli.py)."""

from __future__ import annotations

import pytest

from tests.helpers.pycli import CLI, in_process


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    return in_process(capsys, monkeypatch)
