"""Every hook argument of every spec is pinned to the one chain-rule step its value is
(capture/pins.py): the same derivative as its label, the same value (from the hook-free run),
and a share's pin names the use its label names. Pins are structural: mutating one to a
neighbouring step is caught.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.helpers.capture import captured
from tests.helpers.cli import SPECS
from tests.helpers.pins import pin_problems

SPEC_FILES = sorted(path.name for path in SPECS.glob("*.yaml"))


@pytest.mark.parametrize("spec_file", SPEC_FILES)
def test_every_labelled_argument_is_pinned_to_its_step(spec_file: str) -> None:
    session = captured(spec_file)
    walk = session.walk
    assert pin_problems(session) == []
    pinned = [arg for walk_pass in walk.passes for event in walk_pass.events
              for arg in event.args if arg.pin is not None]
    assert pinned, "the spec has pinned arguments"


def test_a_pin_moved_to_another_step_is_caught() -> None:
    """The checker of pins can fail: each pinned argument of two_modules, moved to every other
    step whose value differs, is reported."""
    session = captured("two_modules.yaml")
    walk = session.walk
    derivation = walk.derivations[0]
    steps = [(line, term) for line, item in enumerate(derivation.lines)
             for term in (None, *range(len(item.terms)))]
    caught = moved = 0
    for index, walk_pass in enumerate(walk.passes):
        for number, event in enumerate(walk_pass.events):
            for position, arg in enumerate(event.args):
                if arg.pin is None:
                    continue
                for line, term in steps:
                    if (line, term) == (arg.pin.line, arg.pin.term):
                        continue
                    args = list(event.args)
                    args[position] = replace(arg, pin=replace(arg.pin, line=line, term=term))
                    events = list(walk_pass.events)
                    events[number] = replace(event, args=tuple(args))
                    passes = list(walk.passes)
                    passes[index] = replace(walk_pass, events=tuple(events))
                    moved += 1
                    moved_walk = replace(walk, passes=tuple(passes))
                    caught += bool(pin_problems(replace(session, walk=moved_walk)))
    # A step with the same tensor and value (t's g and its share from the Sigmoid) may stand
    # in for another; every other move is caught.
    assert moved > 100 and caught >= moved * 0.9


def test_zeros_and_refused_calls_have_no_pin() -> None:
    walk = captured("second_backward.yaml").walk
    refused = {step.run for step in walk.runs if step.error is not None}
    assert refused
    for walk_pass in walk.passes:
        for event in walk_pass.events:
            for arg in event.args:
                if event.run in refused or (arg.meaning and arg.meaning.kind == "zero"):
                    assert arg.pin is None
