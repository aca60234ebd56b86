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


def test_what_a_block_made_is_promoted_unwalked_and_nothing_frozen_is_thawed() -> None:
    """Objects made in the block leave the youngest generation at its end (the first
    collection after it need not walk them), and are still collected when garbage; where
    something is frozen (as `cli.entry` freezes its start-up), it stays frozen."""
    gc.collect()
    with collector_paused():
        made = [[index] for index in range(50_000)]
        cycle: list[object] = []
        cycle.append(cycle)
        assert gc.get_count()[0] >= 50_000
    oldest = {id(item) for item in gc.get_objects(generation=2)}
    assert id(made) in oldest and id(made[-1]) in oldest
    del cycle
    assert gc.collect() >= 1  # the cycle, promoted, is found by a full collection
    frozen = [[index] for index in range(100)]
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with collector_paused():
            more = [[index] for index in range(1_000)]
        assert gc.get_freeze_count() == before
        assert len(more) == len(frozen) * 10
    finally:
        gc.unfreeze()


def test_in_the_command_lines_process_nothing_frozen_is_asked_about(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`cli.entry`'s process froze its start-up: counting what is frozen walks all of it, so a
    block there leaves the generations as the collector has them."""
    from gradexplain import collector

    def walked() -> int:
        raise AssertionError("get_freeze_count walks every frozen object")

    monkeypatch.setitem(collector._collection, "process", True)
    monkeypatch.setattr(gc, "get_freeze_count", walked)
    with collector_paused():
        made = [[index] for index in range(20_000)]
    oldest = {id(item) for item in gc.get_objects(generation=2)}
    assert id(made) not in oldest
