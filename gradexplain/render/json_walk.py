"""`walk --format json`: the contract of DESIGN section 5, as a document `json_stream` writes
(each event made as it is written) or builds whole (`walk_json`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gradexplain.records.codec import to_data
from gradexplain.records.refusals import refusal_text
from gradexplain.records.trace import Nested, Refusal, TensorValue
from gradexplain.records.walk import (
    Check,
    Derivation,
    LabelledArg,
    LabelledEvent,
    Meaning,
    PassWalk,
    Walk,
)
from gradexplain.render.json_stream import Fields, Items, built

SCHEMA = "gradexplain.walk/1"


def walk_json(walk: Walk) -> dict[str, Any]:
    """The walk's JSON document as plain dicts and lists."""
    document: dict[str, Any] = built(walk_document(walk))
    return document


def walk_document(walk: Walk) -> Fields:
    """The walk's JSON document, its events and runs made as they are written."""
    return Fields({
        "schema": SCHEMA,
        "torch": walk.torch,
        "spec": walk.spec,
        "passes": Items(map(pass_json, walk.passes)),
        # Beyond the contract's keys: every call in order, with .grad around it and errors.
        "runs": Items(map(to_data, walk.runs)),
        # Beyond the contract: the chain rule each argument's `step` points into.
        "chain_rule": chain_rule_json(walk.derivations),
        "lessons": to_data(walk.lessons),
    })


def chain_rule_json(derivations: Sequence[Derivation]) -> Items:
    """The derivations field by field, each term's check without its `expected` tensor (the
    term's own value, when verified; the walk's JSON keeps checks as verdicts)."""
    return Items(map(_derivation_json, derivations))


def _derivation_json(derivation: Derivation) -> Any:
    return to_data(replace(derivation, lines=tuple(
        replace(line, terms=tuple(
            replace(term, check=None if term.check is None
                    else replace(term.check, expected=None)) for term in line.terms))
        for line in derivation.lines)))


def pass_json(walk_pass: PassWalk) -> Fields:
    """One pass as the contract writes it (also each rank's pass of `walk --ranks N`)."""
    result = Fields({
        "mode": walk_pass.mode,
        "events": Items(map(_event, walk_pass.events)),
        "grads": {grad.name: plain_values(grad.value) for grad in walk_pass.grads},
        # Beyond the contract: the modules torch refuses full hooks on, and why.
        "refusals": [refusal_json(refusal) for refusal in walk_pass.refusals],
    })
    if walk_pass.graph_changed:
        result["graph_changed"] = walk_pass.graph_changed
    if walk_pass.failed_runs:
        # Beyond the contract, only where torch refused a call in this pass alone.
        result["failed_runs"] = [
            {"run": failure.run, "kind": failure.kind, "of": failure.of,
             "category": failure.error.category, "message": failure.error.message}
            for failure in walk_pass.failed_runs]
    if walk_pass.user_hooks:
        # Beyond the contract, only for a model with hooks of its own: each, and whether this
        # pass ran it (and why not).
        result["user_hooks"] = [to_data(hook) for hook in walk_pass.user_hooks]
    return result


def refusal_json(refusal: Refusal) -> dict[str, Any]:
    """A module left without full hooks: the Refusal's fields and its sentence."""
    return {**to_data(refusal), "text": refusal_text(refusal)}


def _event(event: LabelledEvent) -> dict[str, Any]:
    result = {
        "seq": event.seq,
        "phase": event.phase,
        "hook": event.hook,
        "target": event.target,
        "node": event.node,
        "args": [arg_json(arg) for arg in event.args],
    }
    if event.user is not None:
        # A call of the user's own hook: its function, what it returned in place of its
        # arguments (null: None, nothing replaced), and whether that changed the value.
        result["user"] = event.user
        result["returned"] = (None if event.returned is None
                              else [arg_json(arg) for arg in event.returned])
        result["changed"] = event.changed
    return result


def arg_json(arg: LabelledArg) -> dict[str, Any]:
    """One labelled argument as the contract writes it (also used by `diff --format json`)."""
    result: dict[str, Any] = {"name": arg.name, **tensor_json(arg.value)}
    result["meaning"] = None if arg.meaning is None else _meaning(arg.meaning)
    result["check"] = None if arg.check is None else _check(arg.check)
    if arg.not_checked:
        result["not_checked"] = arg.not_checked
    if arg.pin is not None:
        result["step"] = to_data(arg.pin)
    return result


def tensor_json(value: TensorValue | None) -> dict[str, Any]:
    """A recorded tensor as every document writes it: `shape` (null for None), then `value`
    (null for None), or `summary` where only a summary was recorded."""
    result: dict[str, Any] = {"shape": None if value is None else list(value.shape)}
    if value is not None and value.value is None and value.summary is not None:
        summary = value.summary
        result["summary"] = {key: _number(getattr(summary, key))
                             for key in ("min", "max", "mean", "norm")}
    else:
        result["value"] = plain_values(value)
    return result


def check_json(check: Check | None) -> dict[str, Any] | None:
    """A check as every document writes it (null: nothing was checked)."""
    return None if check is None else _check(check)


def _meaning(meaning: Meaning) -> dict[str, Any]:
    result: dict[str, Any] = {
        "of": meaning.of,
        "wrt": meaning.wrt,
        "aliases": list(meaning.aliases),
        "layout": meaning.layout,
        "text": meaning.text,
        "latex": meaning.latex,
    }
    if meaning.modified:
        result["modified"] = True
    # The claim's structure, where it says more than of/wrt/layout (new keys; DESIGN §5).
    if meaning.kind != "derivative":
        result["kind"] = meaning.kind
    if meaning.via:
        result["via"] = [{"by": use.by, "operand": use.operand} for use in meaning.via]
    if meaning.summed_dims:
        result["summed_dims"] = list(meaning.summed_dims)
    if meaning.runs:
        result["runs"] = list(meaning.runs)
    if meaning.stale_from is not None:
        result["stale_from"] = meaning.stale_from
    if meaning.modified_by is not None:
        result["modified_by"] = meaning.modified_by
    return result


def _check(check: Check) -> dict[str, Any]:
    result: dict[str, Any] = {"verified": check.verified,
                              "max_abs_err": _number(check.max_abs_err)}
    if check.why:
        result["why"] = check.why
    return result


def plain_values(value: TensorValue | None) -> Any:
    """The values as JSON holds them: the record's own lists when every number is finite
    (checked once for the tensor), else a copy with null for each NaN and infinity."""
    if value is None or value.value is None:
        return None
    return value.value if _finite(value.value) else _nested(value.value)


def _finite(value: Nested) -> bool:
    """Whether every number of `value` is finite: its sum is (an infinity or NaN makes the
    sum one; a sum too large for a float only sends the value the slow way)."""
    try:
        return math.isfinite(_total(value))
    except (OverflowError, TypeError):
        return False


def _total(value: Nested) -> float:
    if not isinstance(value, list):
        return value
    if value and isinstance(value[0], list):
        return sum(map(_total, value))
    return sum(value)  # type: ignore[arg-type]  # the innermost list: numbers


def _nested(value: Nested) -> Any:
    if isinstance(value, list):
        return [_nested(item) for item in value]
    return _number(value)


def _number(number: float | int | bool) -> float | int | bool | None:
    """JSON has no NaN or infinity: those become null."""
    if isinstance(number, float) and not math.isfinite(number):
        return None
    return number
