"""The cycle collector paused for a block (gradexplain/collector.py), and back as it was."""

from __future__ import annotations

import gc

import pytest

from gradexplain.collector import collector_paused


def test_the_cycle_collector_resumes_after_an_output_as_it_was() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("a renderer's bug")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # left off by whoever turned it off
    finally:
        gc.enable()
