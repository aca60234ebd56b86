"""`walk --ranks 2`'s renderers (text, JSON, markdown) on the facts file's model under DDP,
DDP inside no_sync() and FSDP2: what they show compared with plain torch computed here, the
text at 100 columns without colour, and golden files of the text (with every rank's timeline)
and the JSON. One 2-rank run per configuration for the whole module.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from gradexplain.language.model import DDPOptions
from gradexplain.records.check import Check
from gradexplain.records.distributed import DistributedWalk
from gradexplain.records.numbers import fmt_nested
from gradexplain.render.console import plain_text
from gradexplain.render.distributed_json import SCHEMA, distributed_document, distributed_json
from gradexplain.render.distributed_markdown import answer_blocks, distributed_markdown
from gradexplain.render.distributed_text import distributed_text
from gradexplain.render.json_stream import json_text
from gradexplain.render.json_walk import pass_json
from gradexplain.render.outputs import distributed_walk_output
from tests.helpers.distributed import FACTS_INPUTS, NAMES, facts_fixture, facts_local
from tests.helpers.golden_json import json_mismatch
from tests.helpers.mdcheck import assert_markdown_well_formed, tables
from tests.helpers.schemacheck import assert_valid

WIDTH = 100


ddp = facts_fixture("ddp", "ddp")
fsdp = facts_fixture("fsdp", "fsdp")
no_sync = facts_fixture("no_sync", "ddp", DDPOptions(no_sync=True))


def mean_grads() -> dict[str, torch.Tensor]:
    return {name: (facts_local(0)[name] + facts_local(1)[name]) / 2 for name in NAMES}


def close(value: Any, expected: torch.Tensor) -> bool:
    if expected.numel() == 0:
        return bool(value == [])  # an empty shard: JSON's nested lists keep no shape
    got = torch.tensor(value, dtype=torch.float64)
    return got.shape == expected.shape and torch.allclose(got, expected.double(), atol=1e-6)


def document(walk: DistributedWalk) -> dict[str, Any]:
    """The JSON as a reader gets it: the streamed text, parsed."""
    parsed: dict[str, Any] = json.loads(json_text(distributed_document(walk)))
    return parsed


def full_pass(rank: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(item for item in rank["passes"] if item["mode"] == "full")
    return found


def hook_value(walk_pass: dict[str, Any], hook: str, target: str) -> Any:
    values = [event["args"][0]["value"] for event in walk_pass["events"]
              if event["hook"] == hook and event["target"] == target]
    assert len(values) == 1, (hook, target)
    return values[0]


def text_of(walk: DistributedWalk, timeline: bool = False) -> str:
    return plain_text(distributed_text(walk, timeline=timeline), WIDTH)


def shown(tensor: torch.Tensor) -> str:
    """A tensor as the text shows it (the one number formatter)."""
    return fmt_nested(tensor.tolist())


# --- JSON ---------------------------------------------------------------------------------


def test_json_ddp_values_are_plain_torchs(ddp: DistributedWalk) -> None:
    data = document(ddp)
    assert (data["schema"], data["world_size"], data["wrap"]) == (SCHEMA, 2, "ddp")
    assert data["ddp"] == dataclasses.asdict(DDPOptions())
    mean = mean_grads()
    total = {name: facts_local(0)[name] + facts_local(1)[name] for name in NAMES}
    for rank in data["ranks"]:
        own = facts_local(rank["rank"])
        assert rank["inputs"] == FACTS_INPUTS[rank["rank"]]
        walk_pass = full_pass(rank)
        grads = {item["name"]: item for item in walk_pass["distributed_grads"]}
        for name in NAMES:
            for hook in ("tensor", "post_accumulate_grad"):
                assert close(hook_value(walk_pass, hook, name), own[name]), (name, hook)
            assert close(grads[name]["value"], mean[name]), name
            assert grads[name]["whose"]["scope"] == "mean"
            assert grads[name]["check"]["verified"] is True
        (bucket,) = walk_pass["buckets"]
        assert {slot["parameter"] for slot in bucket["slots"]} == set(NAMES)
        for slot in bucket["slots"]:
            assert close(slot["before"], own[slot["parameter"]])
            assert close(slot["after"], total[slot["parameter"]])
            assert slot["before_check"]["verified"] and slot["after_check"]["verified"]
        assert all(item["whose"]["scope"] == "local" for item in walk_pass["scoped"])
        assert walk_pass["silent"] == []
    for name in NAMES:
        reference = data["reference"][name]
        assert close(reference["local"][0], facts_local(0)[name])
        assert close(reference["local"][1], facts_local(1)[name])
        assert close(reference["mean"], mean[name])


def test_json_issue_numbers(ddp: DistributedWalk) -> None:
    """The issue's numbers for fc2.weight, from plain torch: each rank's tensor hook, then the
    mean in .grad on both."""
    data = document(ddp)
    first, second = (hook_value(full_pass(rank), "tensor", "fc2.weight")
                     for rank in data["ranks"])
    assert close(first, facts_local(0)["fc2.weight"])
    assert close(second, facts_local(1)["fc2.weight"])
    assert not close(first, facts_local(1)["fc2.weight"])
    for rank in data["ranks"]:
        grad = next(item for item in full_pass(rank)["distributed_grads"]
                    if item["name"] == "fc2.weight")
        assert close(grad["value"], mean_grads()["fc2.weight"])


def test_json_rank_pass_holds_every_walk_key(ddp: DistributedWalk) -> None:
    data = document(ddp)
    for rank, walk_rank in zip(data["ranks"], ddp.ranks, strict=True):
        for walk_pass, own in zip(rank["passes"], walk_rank.walk.passes, strict=True):
            single = json.loads(json_text(pass_json(own)))
            assert {key: walk_pass[key] for key in single} == single
            assert set(walk_pass) - set(single) == {"buckets", "scoped", "distributed_grads",
                                                    "silent"}


def test_json_fsdp_shards_and_silence(fsdp: DistributedWalk) -> None:
    data = document(fsdp)
    assert data["wrap"] == "fsdp" and data["ddp"] is None
    mean = mean_grads()
    for rank in data["ranks"]:
        walk_pass = full_pass(rank)
        assert walk_pass["buckets"] == []
        for grad in walk_pass["distributed_grads"]:
            if grad["name"] not in NAMES:
                continue
            start, stop = grad["whose"]["rows"]
            assert close(grad["value"], mean[grad["name"]][start:stop]), grad["name"]
        silent = {(item["hook"], item["target"]) for item in walk_pass["silent"]}
        assert silent == {("tensor", name) for name in NAMES}
    rows = [next(item["whose"]["rows"] for item in full_pass(rank)["distributed_grads"]
                 if item["name"] == "fc1.weight") for rank in data["ranks"]]
    assert rows == [[0, 2], [2, 3]]
    assert [item["key"] for item in data["pitfalls"]].count("post_accumulate_local") == 0


def test_json_documents_validate(ddp: DistributedWalk, fsdp: DistributedWalk,
                                 no_sync: DistributedWalk) -> None:
    for walk in (ddp, fsdp, no_sync):
        assert_valid(document(walk), "walk-distributed", f"{walk.wrap} document")


def joined(output: Any) -> str:
    """A JSON output's pieces of text, joined."""
    assert not isinstance(output, str)
    return "".join(output)


def test_json_streamed_and_built_agree(fsdp: DistributedWalk) -> None:
    pretty = json.loads(joined(distributed_walk_output(fsdp, "json", pretty=True)))
    assert pretty == distributed_json(fsdp) == document(fsdp)


# --- text ---------------------------------------------------------------------------------


def answer_lines(text: str, heading: str) -> list[str]:
    """The answer's rows under the hook heading that starts with `heading`."""
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(heading))
    found = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        found.append(line)
    return found


def test_text_answer_shows_each_ranks_values(ddp: DistributedWalk) -> None:
    text = text_of(ddp)
    assert "2 ranks, DistributedDataParallel, gloo on 127.0.0.1" in text
    tensor = answer_lines(text, "tensor (register_hook): each rank's own")
    row = next(line for line in tensor if line.strip().startswith("fc2.weight"))
    first, second = shown(facts_local(0)["fc2.weight"]), shown(facts_local(1)["fc2.weight"])
    assert row.index(first) < row.index(second), row
    assert row.count("✓") == 2
    grad = answer_lines(text, ".grad after backward: the mean over 2 ranks")
    row = next(line for line in grad if line.strip().startswith("fc2.weight"))
    assert row.count(shown(mean_grads()["fc2.weight"])) == 2
    assert "bucket 0 after: the sum over 2 ranks" in text


def test_text_is_plain_and_fits(ddp: DistributedWalk, fsdp: DistributedWalk) -> None:
    for walk in (ddp, fsdp):
        text = text_of(walk, timeline=True)
        assert "\x1b" not in text
        assert max(len(line) for line in text.splitlines()) <= WIDTH
        assert text.splitlines()[-1].startswith(f"all {len(walk.checks())} checks verified")


def test_text_fsdp_says_the_silent_hooks(fsdp: DistributedWalk) -> None:
    text = text_of(fsdp)
    rows = answer_lines(text, "tensor (register_hook): never fired")
    assert len(rows) == len(NAMES) and all(line.count("never fired") == 2 for line in rows)
    assert "hooks that never fired" in text
    assert "register_hook never fires" in text
    assert "under FSDP2, param.register_hook never fires" in text


def test_text_no_sync_grad_stays_local(no_sync: DistributedWalk) -> None:
    text = text_of(no_sync)
    assert "DDP options: no_sync=True" in text
    rows = answer_lines(text, ".grad after backward: each rank's own")
    row = next(line for line in rows if line.strip().startswith("fc1.bias"))
    assert shown(facts_local(0)["fc1.bias"]) in row and shown(facts_local(1)["fc1.bias"]) in row
    assert "bucket" not in text.split("what you would get wrong")[0]


def test_text_firing_order_puts_the_bucket_last(ddp: DistributedWalk) -> None:
    text = text_of(ddp)
    order = " ".join(line.strip() for line in
                     text.split("firing order of the full pass")[1].split("\n\n")[0].splitlines())
    assert "the same on ranks 0 and 1" in order
    last_hook = order.index("post_accumulate_grad fc1.weight")
    bucket = order.index("comm hook bucket 0 (")
    assert last_hook < bucket < order.index("backward() returns")


def test_text_timeline_shows_each_rank_and_its_bucket(ddp: DistributedWalk) -> None:
    lines = text_of(ddp, timeline=True).splitlines()
    for rank in (0, 1):
        start = next(index for index, line in enumerate(lines)
                     if line.startswith(f"rank {rank}: full pass"))
        bucket = next(index for index in range(start, len(lines))
                      if "⇄ comm hook bucket 0" in lines[index])
        rank_pass = ddp.ranks[rank].pass_named("full")
        assert rank_pass is not None
        after = rank_pass.buckets[0].after_seq
        event = max(index for index in range(start, bucket)
                    if lines[index][:4].strip().isdigit())
        assert int(lines[event][:4]) == after


def failed(walk: DistributedWalk) -> DistributedWalk:
    """`walk` with rank 1's fc2.weight .grad check failed, as a wrong claim's would."""
    rank = walk.ranks[1]
    rank_pass = rank.pass_named("full")
    assert rank_pass is not None
    wrong = Check(False, 0.5, None, None)
    grads = tuple(dataclasses.replace(item, check=wrong) if item.name == "fc2.weight" else item
                  for item in rank_pass.grads)
    bucket = rank_pass.buckets[0]
    slots = tuple(dataclasses.replace(item, after_check=wrong) if item.parameter == "fc2.bias"
                  else item for item in bucket.slots)
    passes = tuple(dataclasses.replace(rank_pass, grads=grads, buckets=(
        dataclasses.replace(bucket, slots=slots),)) if item is rank_pass else item
                   for item in rank.passes)
    ranks = (walk.ranks[0], dataclasses.replace(rank, passes=passes))
    return dataclasses.replace(walk, ranks=ranks)


def test_a_failed_check_is_loud(ddp: DistributedWalk) -> None:
    bad = failed(ddp)
    assert len(bad.failures()) == 1  # the bucket's; a .grad's check is counted in the walk's
    text = text_of(bad)
    row = next(line for line in answer_lines(text, "bucket 0 after")
               if line.strip().startswith("fc2.bias"))
    assert "✗ FAILED" in row
    assert "1 of " in text.splitlines()[-2] and "FAILED" in text.splitlines()[-2]
    assert "rank 1: bucket 0, fc2.bias after the all-reduce" in text.splitlines()[-1]
    markdown = distributed_markdown(bad)
    assert "✗ **FAILED**" in markdown and "[!CAUTION]" in markdown


# --- markdown -----------------------------------------------------------------------------


def test_markdown_tables(ddp: DistributedWalk, fsdp: DistributedWalk) -> None:
    for walk in (ddp, fsdp):
        markdown = distributed_markdown(walk, timeline=True)
        assert_markdown_well_formed(markdown)
        answer = [(headers, rows) for headers, rows in tables(markdown)
                  if headers[:3] == ["parameter", "rank 0", "rank 1"]]
        assert answer
    markdown = distributed_markdown(ddp)
    rows = next(rows for headers, rows in tables(markdown)
                if headers[:3] == ["parameter", "rank 0", "rank 1"])
    row = next(cells for cells in rows if cells[0] == "`fc2.weight`")
    assert shown(facts_local(0)["fc2.weight"]) in row[1] and "✓" in row[1]
    assert shown(facts_local(1)["fc2.weight"]) in row[2]


def test_answer_blocks_are_the_answer(fsdp: DistributedWalk) -> None:
    blocks = answer_blocks(fsdp, 3)
    assert blocks[0] == "### What each hook on a parameter gets"
    assert "### Hooks that never fired" in blocks
    assert "### What you would get wrong" in blocks
    assert all(block in distributed_markdown(fsdp, 3) for block in blocks)


def test_outputs_in_each_format(no_sync: DistributedWalk) -> None:
    assert isinstance(distributed_walk_output(no_sync, "markdown"), str)
    shown_text = distributed_walk_output(no_sync, "text", timeline=True)
    assert not isinstance(shown_text, str | Iterator)
    assert plain_text(shown_text, WIDTH) == text_of(no_sync, timeline=True)
    assert json.loads(joined(distributed_walk_output(no_sync, "json"))) == document(no_sync)


# --- golden files -------------------------------------------------------------------------


def json_golden(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_golden(wrap: str, request: pytest.FixtureRequest, golden: Any) -> None:
    walk: DistributedWalk = request.getfixturevalue(wrap)
    golden(f"walk_distributed/facts_{wrap}.txt", text_of(walk, timeline=True) + "\n")
    golden(f"walk_distributed/facts_{wrap}.json", json_golden(document(walk)),
           mismatch=json_mismatch)


# --- layouts the facts model does not reach on its own ------------------------------------


def renumbered(walk: DistributedWalk, world_size: int) -> DistributedWalk:
    """`walk`'s ranks repeated up to `world_size` ranks, each numbered as its place: the
    layout of more ranks, without running them."""
    ranks = tuple(dataclasses.replace(walk.ranks[index % len(walk.ranks)], rank=index)
                  for index in range(world_size))
    return dataclasses.replace(walk, world_size=world_size, ranks=ranks)


def test_text_many_ranks_get_a_line_each(ddp: DistributedWalk) -> None:
    text = text_of(renumbered(ddp, 4))
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    lines = answer_lines(text, "tensor (register_hook): each rank's own")
    start = next(index for index, line in enumerate(lines) if line.strip() == "fc2.weight")
    for rank in range(4):
        line = lines[start + 1 + rank]
        assert line.split()[:2] == ["rank", str(rank)], line
        assert shown(facts_local(rank % 2)["fc2.weight"]) in line and line.endswith("✓")


def test_text_ranks_that_disagree_are_said_rank_by_rank(ddp: DistributedWalk) -> None:
    """A .grad one rank keeps as its own while the other's is the mean (as a rank that left
    the all-reduce would), and a rank whose firing order lacks the bucket."""
    rank = ddp.ranks[1]
    rank_pass = rank.pass_named("full")
    assert rank_pass is not None
    grads = tuple(dataclasses.replace(item, whose=dataclasses.replace(
        item.whose, scope="local", when="kept")) if item.name == "fc2.bias" else item
                  for item in rank_pass.grads)
    changed = dataclasses.replace(rank_pass, grads=grads, buckets=())
    walk = dataclasses.replace(ddp, ranks=(ddp.ranks[0], dataclasses.replace(
        rank, passes=tuple(changed if item is rank_pass else item for item in rank.passes))))
    text = text_of(walk)
    rows = answer_lines(text, ".grad after backward: the mean over 2 ranks")
    row = next(index for index, line in enumerate(rows) if line.strip().startswith("fc2.bias"))
    said = " ".join(line.strip() for line in rows[row + 1:row + 3])
    assert said.startswith("rank 0: the mean over 2 ranks; rank 1: its own")
    assert "rank 0: " in said and "rank 1: kept" in said
    order = text.split("firing order of the full pass")[1]
    assert "the ranks' orders differ from step" in order
    assert "\n  rank 0: " in order and "\n  rank 1: " in order
