"""`walk --ranks N --format json`: the `gradexplain.walk-distributed/1` document, streamed as
json_stream writes the walk's (each rank's events made as they are written).

Each rank's pass is the walk/1 pass object (json_walk's own encoder: every key of the contract),
plus what the wrapping adds: `buckets`, `scoped`, `distributed_grads`, `silent`. Values are
full-precision nested lists and checks are verdicts, as in walk/1. docs/json.md describes it.
"""

from __future__ import annotations

from typing import Any

from gradexplain.records.codec import to_data
from gradexplain.records.distributed import (
    BucketSlot,
    CheckedBucket,
    DistributedGrad,
    DistributedWalk,
    RankPass,
    RankWalk,
    ReferenceGrad,
    ScopedArg,
    Whose,
)
from gradexplain.records.walk import Check, PassWalk
from gradexplain.render.json_stream import Fields, Items, built
from gradexplain.render.json_walk import check_json, pass_json, plain_values

SCHEMA = "gradexplain.walk-distributed/1"


def distributed_json(walk: DistributedWalk) -> dict[str, Any]:
    """The document as plain dicts and lists."""
    document: dict[str, Any] = built(distributed_document(walk))
    return document


def distributed_document(walk: DistributedWalk) -> Fields:
    """The whole distributed walk, each rank's passes made as they are written."""
    return Fields({
        "schema": SCHEMA,
        "torch": walk.torch,
        "spec": walk.spec,
        "world_size": walk.world_size,
        "wrap": walk.wrap,
        "backend": walk.backend,
        "ddp": None if walk.ddp is None else to_data(walk.ddp),
        "ranks": Items(map(_rank, walk.ranks)),
        "reference": {item.name: _reference(item) for item in walk.reference},
        "pitfalls": [{"key": item.key, "title": item.title, "text": item.text}
                     for item in walk.pitfalls],
        "notes": list(walk.notes),
    })


def _rank(rank: RankWalk) -> Fields:
    added = {item.mode: item for item in rank.passes}
    return Fields({
        "rank": rank.rank,
        "inputs": {name: plain_values(value) for name, value in rank.inputs},
        "passes": Items(_pass(walk_pass, added.get(walk_pass.mode))
                        for walk_pass in rank.walk.passes),
        # As walk/1's `runs`: each call with .grad around it, and what torch refused.
        "runs": [to_data(step) for step in rank.walk.runs],
    })


def _pass(walk_pass: PassWalk, rank_pass: RankPass | None) -> Fields:
    """The walk/1 pass, then what the wrapping adds to it (empty where it added nothing)."""
    result = pass_json(walk_pass)
    result["buckets"] = [] if rank_pass is None else [_bucket(item)
                                                      for item in rank_pass.buckets]
    result["scoped"] = [] if rank_pass is None else [_scoped(item) for item in rank_pass.scoped]
    result["distributed_grads"] = [] if rank_pass is None else [_grad(item)
                                                                for item in rank_pass.grads]
    result["silent"] = [] if rank_pass is None else [
        {"hook": item.hook, "target": item.target, "why": item.why} for item in rank_pass.silent]
    return result


def _bucket(bucket: CheckedBucket) -> dict[str, Any]:
    return {
        "index": bucket.index,
        "run": bucket.run,
        "after_seq": bucket.after_seq,
        "slots": [_slot(slot) for slot in bucket.slots],
    }


def _slot(slot: BucketSlot) -> dict[str, Any]:
    result = {"parameter": slot.parameter,
              "before": plain_values(slot.before),
              "before_check": check_json(slot.before_check),
              "after": plain_values(slot.after),
              "after_check": check_json(slot.after_check),
              "changed_by": slot.changed_by}
    if slot.not_checked:
        result["not_checked"] = slot.not_checked
    return result


def _scoped(arg: ScopedArg) -> dict[str, Any]:
    return {"seq": arg.seq, "arg": arg.arg, **_read(arg.whose, arg.check, arg.not_checked)}


def _grad(grad: DistributedGrad) -> dict[str, Any]:
    return {"name": grad.name, "value": plain_values(grad.value),
            **_read(grad.whose, grad.check, grad.not_checked)}


def _read(whose: Whose, check: Check | None, not_checked: str | None) -> dict[str, Any]:
    """A value read as distributed: whose it is, its check, and why not, where there is none."""
    result: dict[str, Any] = {"whose": whose_json(whose), "check": check_json(check)}
    if not_checked:
        result["not_checked"] = not_checked
    return result


def whose_json(whose: Whose) -> dict[str, Any]:
    """Whose derivative a value is, as both distributed documents write it."""
    return {"scope": whose.scope, "text": whose.text, "when": whose.when,
            "rows": None if whose.rows is None else list(whose.rows)}


def _reference(item: ReferenceGrad) -> dict[str, Any]:
    return {"local": [plain_values(value) for value in item.local],
            "mean": plain_values(item.mean)}


__all__ = ["SCHEMA", "distributed_document", "distributed_json", "whose_json"]
