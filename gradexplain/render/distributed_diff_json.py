"""`diff --ranks N --format json`: each rank's single-process walk beside its distributed one as
data (schema gradexplain.diff-distributed/1, docs/json.md).

Each side of an argument is an argument exactly as `walk --format json` writes it (name, shape,
value, meaning, check), or null where that side has no such argument or the call did not fire;
every other tensor (a bucket's slot, a `.grad`) is `shape` and `value` (or `summary`) as there.
"""

from __future__ import annotations

from typing import Any

from gradexplain.records.distributed import BucketSlot
from gradexplain.records.distributed_diff import (
    ArgChange,
    BucketChange,
    CallChange,
    DistributedDiff,
    GradChange,
    PassChange,
    RankChange,
)
from gradexplain.render.distributed_json import whose_json
from gradexplain.render.json_stream import Fields, Items, built
from gradexplain.render.json_walk import arg_json, check_json, tensor_json

SCHEMA = "gradexplain.diff-distributed/1"


def distributed_diff_json(diff: DistributedDiff) -> dict[str, Any]:
    """The document as plain dicts and lists."""
    document: dict[str, Any] = built(distributed_diff_document(diff))
    return document


def distributed_diff_document(diff: DistributedDiff) -> Fields:
    """The document, each rank made as it is written (`json_stream`)."""
    return Fields({
        "schema": SCHEMA,
        "torch": diff.torch,
        "spec": diff.spec,
        "name": diff.name,
        "world_size": diff.world_size,
        "wrap": diff.wrap,
        "ranks": Items(map(_rank, diff.ranks)),
    })


def _rank(rank: RankChange) -> dict[str, Any]:
    return {
        "rank": rank.rank,
        "inputs": [{"name": name, **tensor_json(value)} for name, value in rank.inputs],
        "passes": [_pass(change) for change in rank.passes],
        "verdict": rank.verdict,
    }


def _pass(change: PassChange) -> dict[str, Any]:
    return {
        "mode": change.mode,
        "single_calls": change.single_calls,
        "wrapped_calls": change.wrapped_calls,
        "calls": [_call(call) for call in change.calls],
        "buckets": [_bucket(bucket) for bucket in change.buckets],
        "grads": [_grad(grad) for grad in change.grads],
    }


def _call(call: CallChange) -> dict[str, Any]:
    return {
        "hook": call.hook,
        "target": call.target,
        "node": call.node,
        "user": call.user,
        "occurrence": call.occurrence,
        "run": call.run,
        "single_seq": call.single_seq,
        "wrapped_seq": call.wrapped_seq,
        "kind": call.kind,
        "args": [_arg(arg) for arg in call.args],
        "reason": call.reason,
    }


def _arg(arg: ArgChange) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": arg.name,
        "single": None if arg.single is None else arg_json(arg.single),
        "wrapped": None if arg.wrapped is None else arg_json(arg.wrapped),
        "same_value": arg.same_value,
        "same_label": arg.same_label,
        "whose": None if arg.whose is None else whose_json(arg.whose),
    }
    if arg.whose is not None:
        result["whose_check"] = check_json(arg.whose_check)
        if arg.not_checked:
            result["not_checked"] = arg.not_checked
    return result


def _bucket(change: BucketChange) -> dict[str, Any]:
    bucket = change.bucket
    return {"index": bucket.index, "run": bucket.run, "after_seq": bucket.after_seq,
            "slots": [_slot(slot) for slot in bucket.slots], "reason": change.reason}


def _slot(slot: BucketSlot) -> dict[str, Any]:
    result = {"parameter": slot.parameter,
              "before": tensor_json(slot.before), "before_check": check_json(slot.before_check),
              "after": tensor_json(slot.after), "after_check": check_json(slot.after_check),
              "changed_by": slot.changed_by}
    if slot.not_checked:
        result["not_checked"] = slot.not_checked
    return result


def _grad(grad: GradChange) -> dict[str, Any]:
    single = wrapped = None
    if grad.single is not None:
        single = {**tensor_json(grad.single.value), "check": check_json(grad.single.check)}
    if grad.wrapped is not None:
        wrapped = {**tensor_json(grad.wrapped.value), "whose": whose_json(grad.wrapped.whose),
                   "check": check_json(grad.wrapped.check)}
        if grad.wrapped.not_checked:
            wrapped["not_checked"] = grad.wrapped.not_checked
    return {"name": grad.name, "changed": grad.changed, "equal": grad.equal,
            "single": single, "wrapped": wrapped, "reason": grad.reason}


__all__ = ["SCHEMA", "distributed_diff_document", "distributed_diff_json"]
