"""`diff --format json`: the legacy-vs-full alignment as data (schema gradexplain.diff/1).

Each side of a row is an argument exactly as `walk --format json` writes it (name, shape,
value, meaning, check), or null when that hook has no such argument or did not fire.
"""

from __future__ import annotations

from typing import Any

from gradexplain.records.diff import ArgRow, CallDiff, HookDiff, ModuleDiff
from gradexplain.render.json_stream import Fields, Items, built
from gradexplain.render.json_walk import arg_json

SCHEMA = "gradexplain.diff/1"


def diff_json(diff: HookDiff) -> dict[str, Any]:
    """The diff's JSON document as plain dicts and lists."""
    document: dict[str, Any] = built(diff_document(diff))
    return document


def diff_document(diff: HookDiff) -> Fields:
    """The diff's JSON document, each module made as it is written (`json_stream`)."""
    result = Fields({
        "schema": SCHEMA,
        "torch": diff.torch,
        "spec": diff.spec,
        "modules": Items(map(_module, diff.modules)),
    })
    if diff.graph_changed:
        result["graph_changed"] = diff.graph_changed
    return result


def _module(module: ModuleDiff) -> dict[str, Any]:
    return {
        "module": module.module,
        "arguments": list(module.arguments),
        "legacy_node": module.last_node,
        "first_output": module.made,
        "step": module.step,
        "calls": [_call(call) for call in module.calls],
        "findings": [{"kind": finding.kind, "text": finding.text}
                     for finding in module.findings()],
        "verdict": module.verdict,
    }


def _call(call: CallDiff) -> dict[str, Any]:
    return {
        "run": call.run,
        "call": call.ordinal,
        "legacy_seq": call.legacy_seq,
        "full_seq": call.full_seq,
        "rows": [_row(row) for row in call.rows],
    }


def _row(row: ArgRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "same": row.same,
        "legacy": None if row.legacy is None else arg_json(row.legacy),
        "full": None if row.full is None else arg_json(row.full),
        "note": row.note,
    }
