"""Folding repeated blocks in text output: the pure planner (`render/collapse.py`) on made-up
sequences, and `walk_text` on a real walk of a deep Python model, where a failed check must
still be printed in full and `collapse=False` prints everything."""

from __future__ import annotations

import dataclasses
import functools
import re
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from gradexplain.capture.pipeline import capture
from gradexplain.capture.pymodel import parse_input, python_source, random_inputs
from gradexplain.records.walk import Check, LabelledEvent, PassWalk, Walk
from gradexplain.render import collapse
from gradexplain.render.collapse import (
    Folded,
    FoldedBlocks,
    Plan,
    Shown,
    folded_blocks,
    path_numbers,
    plan_folds,
    shape_key,
    show_all,
)
from gradexplain.render.console import plain_text
from gradexplain.render.text_walk import walk_text
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS
from tests.helpers.pymodels import Block

BLOCKS = 12


def shapes(text: str) -> list[str]:
    """One item per character: `"xy" + "abc" * 3` is a prefix and three repeats of `abc`."""
    return list(text)


# --- the planner ---------------------------------------------------------------------------------


def test_a_periodic_run_keeps_its_first_and_last_repeat() -> None:
    items = shapes("xy" + "abc" * 10 + "z")
    plan = plan_folds(items)
    assert plan.steps == (Shown(0, 5), Folded(5, 29, 3), Shown(29, 33))
    assert plan.folds[0].repeats == 8


def test_the_period_that_hides_most_wins_and_ties_go_to_the_shortest() -> None:
    # `ab` * 10 is also `abab` * 5: both hide items, period 2 hides more.
    assert plan_folds(shapes("ab" * 10)).steps == (Shown(0, 2), Folded(2, 18, 2), Shown(18, 20))
    # Six-item blocks whose halves differ: only period 6 repeats.
    block = "abcabd"
    assert plan_folds(shapes(block * 6)).folds == (Folded(6, 30, 6),)


def test_a_failure_inside_a_repeat_is_shown_with_its_block() -> None:
    items: list[str | None] = list(shapes("abcd" * 20))
    failed = 4 * 10 + 2  # the third item of the eleventh repeat
    items[failed] = None
    plan = plan_folds(items)
    shown = shown_items(plan)
    assert failed in shown
    # The whole repeat around it, whichever way the repeats are cut, is printed.
    assert set(range(failed - 3, failed + 4)) <= shown
    for fold in plan.folds:
        assert not fold.start <= failed < fold.stop
    assert len(plan.folds) == 2  # one run before the failure, one after


def test_a_sequence_without_repeats_is_left_alone() -> None:
    items = shapes("the quick brown fox jumps over a lazy dog")
    assert plan_folds(items) == show_all(len(items))
    assert plan_folds([]) == Plan(())


def test_folding_starts_at_min_hidden_repeats() -> None:
    # The first and last repeat stay shown, so 4 repeats would hide only 2: not worth a note.
    assert plan_folds(shapes("abc" * 4)) == show_all(12)
    assert plan_folds(shapes("abc" * 5)).folds == (Folded(3, 12, 3),)
    assert plan_folds(shapes("abc" * 5), min_hidden=4) == show_all(15)
    assert plan_folds(shapes("abc" * 4), min_hidden=2).folds == (Folded(3, 9, 3),)


def test_periods_longer_than_max_period_are_not_looked_for() -> None:
    items = [f"item {index % 8}" for index in range(80)]
    assert plan_folds(items, max_period=7) == show_all(80)
    assert plan_folds(items, max_period=8).folds == (Folded(8, 72, 8),)


def test_shapes_of_none_never_match_each_other() -> None:
    assert plan_folds([None] * 20) == show_all(20)


# No deadline: hypothesis's default (200 ms an example, wall clock) fails on a slow or loaded
# machine, not on a wrong plan.
@settings(deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from("ab")), max_size=60),
       st.integers(min_value=1, max_value=4))
def test_every_plan_covers_each_item_once_and_folds_only_true_repeats(
        items: list[str | None], min_hidden: int) -> None:
    plan = plan_folds(items, min_hidden=min_hidden)
    assert plan == plan_folds(items, min_hidden=min_hidden)  # deterministic
    covered = [index for step in plan.steps for index in range(step.start, step.stop)]
    assert covered == list(range(len(items)))
    for fold in plan.folds:
        assert fold.repeats >= min_hidden
        assert (fold.stop - fold.start) % fold.period == 0
        # The shown repeat above, every hidden one and the shown one below read alike.
        first = items[fold.start - fold.period:fold.start]
        for start in range(fold.start, fold.stop + 1, fold.period):
            assert items[start:start + fold.period] == first
        assert None not in first
        assert {fold.start - 1, fold.stop} <= shown_items(plan)


@settings(deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), st.sampled_from("abc")), min_size=1, max_size=4)
                .flatmap(lambda block: st.integers(1, 8).map(lambda times: block * times)),
                max_size=8).map(lambda runs: [item for run in runs for item in run]),
       st.integers(min_value=1, max_value=4))
def test_periods_left_out_for_too_few_matches_change_no_plan(
        items: list[str | None], min_hidden: int) -> None:
    """The count that leaves a period out (`_may_fold`) never leaves out one that folds."""
    plan = plan_folds(items, min_hidden=min_hidden)
    with mock.patch.object(collapse, "_may_fold", lambda *_: True):
        assert plan_folds(items, min_hidden=min_hidden) == plan


def test_shape_key_masks_block_numbers_and_counters_only() -> None:
    text = ("node n17 on AddmmBackward0 ∂loss/∂blocks.3.linear:addmm grad_input[0] layer1.2 "
            "encoder.3:relu add#6ᵀ 4.linear.weightᵀ")
    assert shape_key(text) == ("node # on AddmmBackward0 ∂loss/∂blocks.#.linear:addmm "
                               "grad_input[0] layer1.# encoder.#:relu add##ᵀ #.linear.weightᵀ")
    assert path_numbers(text) == {2, 3, 4}
    # A ReLU's mask opens a bracket with a path: the block number in it is masked too, the
    # argument position is not.
    mask = "g ⊙ [47.linear:addmm > 0] grad_inputs[1]"
    assert shape_key(mask) == "g ⊙ [#.linear:addmm > 0] grad_inputs[1]"
    assert path_numbers(mask) == {47}


def test_folded_blocks_names_the_blocks_only_the_fold_holds() -> None:
    texts = ["start"] + [f"{block}.{part}" for block in range(10) for part in ("linear", "act")]
    plan = plan_folds([shape_key(text) for text in texts])
    assert plan.folds == (Folded(3, 19, 2),)
    assert folded_blocks(plan.folds[0], texts) == FoldedBlocks(range(1, 9), ())
    # Numbers that are not consecutive name no range.
    gappy = ["start"] + [f"{block}.{part}" for block in range(0, 20, 2)
                         for part in ("linear", "act")]
    assert folded_blocks(plan.folds[0], gappy) is None


def shown_items(plan: Plan) -> set[int]:
    return {index for step in plan.steps if isinstance(step, Shown)
            for index in range(step.start, step.stop)}


# --- walk_text on a deep model -------------------------------------------------------------------


@functools.cache
def deep_walk(blocks: int = BLOCKS) -> Walk:
    """A real walk of `blocks` identical blocks (one capture each for the whole test run)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = nn.Sequential(*[Block(4) for _ in range(blocks)])
        source = python_source(model, random_inputs([parse_input("2x4")]), "test:deep")
        return capture(source.spec, "test:deep", source.description, source.build).walk


def fold_notes(text: str) -> list[str]:
    return [line for line in text.splitlines() if "⋯" in line]


def event_heads(text: str) -> set[str]:
    """`31 backward 3.act` of every event printed, by its sequence number and target."""
    return {" ".join(match.groups()) for match in
            re.finditer(r"^ *(\d+) (\w+) (\S+)", text, flags=re.MULTILINE)}


def head(event: LabelledEvent) -> str:
    return f"{event.seq} {event.hook} {event.target or '<model>'}"


def test_a_deep_model_folds_into_a_much_shorter_text() -> None:
    walk = deep_walk()
    full = plain_text(walk_text(walk, collapse=False, timeline=True))
    folded = plain_text(walk_text(walk, timeline=True))
    assert len(folded.splitlines()) < len(full.splitlines()) / 2
    notes = fold_notes(folded)
    # The chain rule, and each pass's forward and backward timelines (without the session's
    # diff, walk_text has no answer table to fold).
    assert len(notes) == 1 + 2 * len(walk.passes)
    for note in notes:
        assert re.fullmatch(r"  ⋯ blocks \d+–\d+( and parts of [\d–]+(, [\d–]+)*)? folded: "
                            r"\d+ (events|steps|rows), "
                            r"(all \d+ checks ✓|no checks); --all-blocks shows them", note), note
        assert len(note) <= 100
    # The forward timeline: block 0 shown, 1 to 10 folded, block 11 shown.
    hidden = BLOCKS - 2
    assert (f"  ⋯ blocks 1–{hidden} folded: {6 * hidden} events, no checks; --all-blocks shows "
            "them") in notes
    # The verdict still counts every check, folded or not.
    assert folded.splitlines()[-1] == full.splitlines()[-1]
    assert f"all {len(walk.checks())} checks verified" in folded


def test_collapse_false_prints_every_event_and_line() -> None:
    walk = deep_walk()
    full = plain_text(walk_text(walk, collapse=False, timeline=True))
    assert not fold_notes(full)
    printed = event_heads(full)
    for walk_pass in walk.passes:
        assert {head(event) for event in walk_pass.events} <= printed
    lines = walk.derivations[0].lines
    assert sum(full.count(f"= ∂loss/∂{line.output} =") for line in lines) >= len(lines)


def test_folding_shows_the_first_and_last_repeat_of_each_run() -> None:
    walk = deep_walk()
    printed = event_heads(plain_text(walk_text(walk, timeline=True)))
    forward = [event for event in walk.passes[0].events if event.phase == "forward"]
    for block in (0, BLOCKS - 1):
        assert {head(event) for event in forward if _in_block(event, block)} <= printed
    for block in range(1, BLOCKS - 1):
        assert not {head(event) for event in forward if _in_block(event, block)} & printed


def test_a_failed_check_in_a_middle_block_is_printed_in_full() -> None:
    # Deep enough that the repeats on either side of the failure are worth folding too.
    blocks = 20
    walk = deep_walk(blocks)
    middle = blocks // 2
    broken = _fail_one_check(walk, "full", f"{middle}.linear", "full_backward")
    full_pass = next(item for item in broken.passes if item.mode == "full")
    text = plain_text(walk_text(broken, timeline=True))
    assert "✗ FAILED (error 0.5)" in text
    assert f"1 of {len(walk.checks())} checks FAILED" in text
    # Every backward event of the block with the failure is printed, not folded.
    printed = event_heads(text)
    block = {head(event) for event in full_pass.events
             if event.phase == "backward" and _in_block(event, middle)}
    assert block and block <= printed
    # The repeats before and after the failure still fold, each in a run of its own.
    full_backward = text[text.index("full pass:"):]
    assert len([note for note in fold_notes(full_backward) if "checks ✓" in note]) == 2
    assert len(text.splitlines()) < len(plain_text(walk_text(broken, collapse=False,
                                                             timeline=True))
                                         .splitlines()) / 2


@pytest.mark.parametrize("spec", sorted(path.name for path in SPECS.glob("*.yaml")))
def test_small_specs_fold_nothing(spec: str) -> None:
    walk = captured(spec).walk
    assert plain_text(walk_text(walk, timeline=True)) == plain_text(
        walk_text(walk, collapse=False, timeline=True))


def _in_block(event: LabelledEvent, block: int) -> bool:
    return event.target == str(block) or event.target.startswith(f"{block}.")


def _fail_one_check(walk: Walk, mode: str, target: str, hook: str) -> Walk:
    """The walk with the first checked argument of one event made to fail."""
    passes: list[PassWalk] = []
    for walk_pass in walk.passes:
        events = list(walk_pass.events)
        if walk_pass.mode == mode:
            index = next(index for index, event in enumerate(events)
                         if event.target == target and event.hook == hook)
            events[index] = _fail_first(events[index])
        passes.append(dataclasses.replace(walk_pass, events=tuple(events)))
    return dataclasses.replace(walk, passes=tuple(passes))


def _fail_first(event: LabelledEvent) -> LabelledEvent:
    args = list(event.args)
    index = next(index for index, arg in enumerate(args) if arg.check is not None)
    check = args[index].check
    assert check is not None
    args[index] = dataclasses.replace(args[index], check=Check(False, 0.5, check.expected))
    return dataclasses.replace(event, args=tuple(args))

