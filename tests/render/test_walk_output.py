"""What walk's renderers are handed: the filters (render/select.py), the JSON contract keys
(render/json_walk.py) and the one number format (records/numbers.py)."""

from __future__ import annotations

import json

import pytest

from gradexplain.language import load_spec
from gradexplain.records.numbers import fmt
from gradexplain.records.walk import Walk
from gradexplain.render.json_walk import walk_json
from gradexplain.render.select import select
from tests.helpers.capture import walk
from tests.helpers.cli import SPECS

TWO_MODULES = SPECS / "two_modules.yaml"


@pytest.fixture(scope="module")
def two_modules() -> Walk:
    return walk(load_spec(TWO_MODULES), "specs/two_modules.yaml")


def test_select_keeps_what_the_filters_ask(two_modules: Walk) -> None:
    only = select(two_modules, ["full"], "module2", ["full_backward"])
    (full,) = only.passes
    assert full.mode == "full"
    assert {event.target for event in full.events} == {"module2", "module2.l",
                                                        "module2.activation"}
    assert {event.hook for event in full.events} == {"full_backward"}
    tensors = select(two_modules, ["legacy"], "module2", ["tensor"])
    assert {event.target for event in tensors.passes[0].events} == {"module2.t",
                                                                    "module2.l.weight"}


def test_json_has_the_contract_keys(two_modules: Walk) -> None:
    data = walk_json(two_modules)
    # The contract's keys first, then what walk adds beyond them.
    assert list(data) == ["schema", "torch", "spec", "passes", "runs", "chain_rule", "lessons"]
    assert data["schema"] == "gradexplain.walk/1"
    for walk_pass in data["passes"]:
        # then beyond the contract: the modules torch refuses full hooks on (none here)
        assert list(walk_pass) == ["mode", "events", "grads", "refusals"]
        assert walk_pass["refusals"] == []
        for event in walk_pass["events"]:
            assert list(event) == ["seq", "phase", "hook", "target", "node", "args"]
            for arg in event["args"]:
                # then, where the value is a step of the chain rule, where it is in it
                assert list(arg) in (["name", "shape", "value", "meaning", "check"],
                                     ["name", "shape", "value", "meaning", "check", "step"])
                if "step" in arg:
                    step = arg["step"]
                    line = data["chain_rule"][0]["lines"][step["line"]]
                    assert step["run"] == data["chain_rule"][0]["run"]
                    assert step["term"] is None or step["term"] < len(line["terms"])
                if arg["meaning"] is not None:
                    assert list(arg["meaning"]) == ["of", "wrt", "aliases", "layout", "text",
                                                    "latex"]
    json.dumps(data, allow_nan=False)


def test_fmt_is_one_format() -> None:
    assert [fmt(0.187463641166687), fmt(-0.041204508394002914), fmt(6.0), fmt(-0.0)] == [
        "0.18746", "-0.041205", "6", "0"]
