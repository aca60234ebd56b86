"""Builds the JSON Schemas shipped in gradexplain/schemas/: a development tool, not part of the
package (users read the files; nothing at run time builds them).

A document has two kinds of parts. The contract parts of `gradexplain.walk/1` and
`gradexplain.diff/1` (DESIGN section 5) are dicts that gradexplain/render/json_walk.py and
json_diff.py build by hand, so their schema is written by hand here, key by key. Everything
else (walk's `runs`, `lessons` and `firing_order`, and the whole `gradexplain.session/2`) is
`codec.to_data` of frozen dataclasses, so its schema is derived from the dataclasses' type
hints, case by case as `codec.from_data` decodes them. tests/schemas/test_schemas_shipped.py
checks the shipped files equal `render(...)` of what is built here; `python -m pytest
--update-golden` rewrites them.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Union

from gradexplain.analysis.order import FiringOrder
from gradexplain.language.model import DDPOptions, WrapKind
from gradexplain.records.diff import FindingKind
from gradexplain.records.distributed import Scope
from gradexplain.records.distributed_diff import ChangeKind
from gradexplain.records.session import SCHEMA as SESSION_SCHEMA
from gradexplain.records.session import Session
from gradexplain.records.trace import HookKind, Mode, Phase, RefusalReason, UserHook
from gradexplain.records.walk import Derivation, Layout, Lessons, RunStep
from gradexplain.render.distributed_diff_json import SCHEMA as DISTRIBUTED_DIFF_SCHEMA
from gradexplain.render.distributed_json import SCHEMA as DISTRIBUTED_SCHEMA
from gradexplain.render.json_diff import SCHEMA as DIFF_SCHEMA
from gradexplain.render.json_walk import SCHEMA as WALK_SCHEMA

Schema = dict[str, Any]

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def file_name(schema_id: str) -> str:
    """`gradexplain.walk/1` -> `walk-1.schema.json`."""
    kind, version = schema_id.removeprefix("gradexplain.").split("/")
    return f"{kind}-{version}.schema.json"


def schemas() -> dict[str, Schema]:
    """Every shipped schema, by file name."""
    return {file_name(WALK_SCHEMA): walk_schema(), file_name(DIFF_SCHEMA): diff_schema(),
            file_name(SESSION_SCHEMA): session_schema(),
            file_name(DISTRIBUTED_SCHEMA): distributed_schema(),
            file_name(DISTRIBUTED_DIFF_SCHEMA): distributed_diff_schema()}


def render(schema: Schema) -> str:
    """The file's text: keys in the order built here (field order, $defs sorted by name), and
    one key a line, so a change to a dataclass is a readable diff."""
    return json.dumps(schema, ensure_ascii=False, indent=1) + "\n"


# --- dataclasses, as codec.to_data writes them and codec.from_data reads them ---------------


class Derived:
    """Schemas of dataclass types, collected as `$defs` (one per dataclass, by module-qualified
    name) so a type used in many places is described once.

    `closed`: a dataclass object takes no keys beyond its fields. from_data refuses unknown
    keys, so the session (which only from_data reads) is closed; the walk's extra parts are
    open, since walk JSON promises that new keys may be added.
    """

    def __init__(self, closed: bool) -> None:
        self.closed = closed
        self.defs: dict[str, Schema] = {}
        self.owners: dict[str, type] = {}

    def of(self, kind: Any) -> Schema:
        """The schema of values `from_data(kind, ...)` accepts; mirrors codec._decode.

        One difference JSON Schema cannot express: "integer" also takes 1.0, which from_data
        refuses for an int (to_data never writes one)."""
        if kind is Any:
            return {}
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            return self._dataclass(kind)
        origin = typing.get_origin(kind)
        args = typing.get_args(kind)
        if origin in (Union, types.UnionType):
            return self._union(args)
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (tuple, list, frozenset):
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                if not args:
                    raise TypeError(f"{kind!r}: an empty fixed tuple is not supported")
                return {"type": "array", "prefixItems": [self.of(arg) for arg in args],
                        "items": False, "minItems": len(args), "maxItems": len(args)}
            if not args:
                raise TypeError(f"{kind!r}: give the item type")
            # A frozenset is written sorted, but from_data takes any list (duplicates too).
            return {"type": "array", "items": self.of(args[0])}
        if origin is dict:
            return {"type": "object", "additionalProperties": self.of(args[1])}
        scalars: dict[Any, Schema] = {
            float: {"$ref": "#/$defs/float"},
            int: {"type": "integer"},
            bool: {"type": "boolean"},
            str: {"type": "string"},
        }
        if kind in scalars:
            if kind is float:
                self.defs["float"] = FLOAT
            return dict(scalars[kind])
        raise TypeError(f"cannot derive a schema for {kind!r}")

    def _dataclass(self, kind: type) -> Schema:
        # Named by the class alone, so that moving a module does not change a shipped schema.
        name = kind.__qualname__
        ref = {"$ref": f"#/$defs/{name}"}
        if self.owners.setdefault(name, kind) is not kind:
            raise TypeError(f"two record types are named {name}: rename one")
        if name in self.defs:
            return ref
        self.defs[name] = {}  # a placeholder first: a type may refer to itself
        hints = typing.get_type_hints(kind)
        fields = dataclasses.fields(kind)
        schema: Schema = {
            "description": f"codec.to_data of {name}",
            "type": "object",
            "properties": {field.name: self.of(hints[field.name]) for field in fields},
            "required": [field.name for field in fields
                         if field.default is dataclasses.MISSING
                         and field.default_factory is dataclasses.MISSING],
        }
        if self.closed:
            schema["additionalProperties"] = False
        self.defs[name] = schema
        return ref

    def _union(self, args: tuple[Any, ...]) -> Schema:
        nullable = type(None) in args
        members = [arg for arg in args if arg is not type(None)]
        if float in members and any(typing.get_origin(arg) is list for arg in members):
            # codec._union's special case: a tensor's values (records.trace.Nested)
            self.defs["Nested"] = NESTED
            options: list[Schema] = [{"$ref": "#/$defs/Nested"}]
        else:
            options = [self.of(arg) for arg in members]
        if nullable:
            options.append({"type": "null"})
        if len(options) == 1:
            return options[0]
        if all(option.keys() == {"type"} and isinstance(option["type"], str)
               for option in options):
            return {"type": [option["type"] for option in options]}  # str | None: one line
        return {"anyOf": options}

    def sorted_defs(self) -> dict[str, Schema]:
        return dict(sorted(self.defs.items()))


# Plain schemas, not an anyOf of number and enum: a large session holds hundreds of thousands
# of numbers, and every extra branch is one more step per number for a validator (pattern
# applies to strings only, so it leaves numbers alone).
NON_FINITE_PATTERN = "^(inf|-inf|nan)$"
FLOAT: Schema = {
    "description": "A float. JSON has no infinity or NaN: codec.to_data writes them as the "
                   "strings \"inf\", \"-inf\" and \"nan\".",
    "type": ["number", "string"],
    "pattern": NON_FINITE_PATTERN,
}
NESTED: Schema = {
    "description": "A tensor's values (records.trace.Nested): a number or boolean for a 0-d "
                   "tensor, else nested lists of them, one level per dimension; non-finite "
                   "values are the strings \"inf\", \"-inf\" and \"nan\".",
    "type": ["number", "boolean", "string", "array"],
    "pattern": NON_FINITE_PATTERN,
    "items": {"$ref": "#/$defs/Nested"},
}


# --- the contract parts, as render/json_walk.py and json_diff.py build them ------------------


def _nullable(ref: str) -> Schema:
    return {"anyOf": [{"$ref": f"#/$defs/{ref}"}, {"type": "null"}]}


def _enum(literal: Any) -> list[str]:
    return list(typing.get_args(literal))


def contract_defs() -> dict[str, Schema]:
    """One labelled hook argument (walk's `args[]`, and each side of a diff row) and what it
    is made of: json_walk.arg_json and the helpers it calls."""
    return {
        "argument": {
            "description": "One argument of one hook call: `value`, or for a tensor recorded as "
                           "a summary (over the value limit) `summary` instead.",
            "type": "object",
            "properties": {
                "name": {"type": "string",
                         "description": "The hook's own argument name with its index: "
                                        "grad_input[1], grad_output[0], input[0], output, "
                                        "grad, tensor."},
                "shape": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0},
                          "description": "The tensor's shape; null where the argument is None."},
                "value": {"$ref": "#/$defs/values"},
                "summary": {"$ref": "#/$defs/summary"},
                "meaning": _nullable("meaning"),
                "check": _nullable("check"),
                "not_checked": {"type": "string",
                                "description": "Present only where a derivative has no check: "
                                               "why (a call torch refused)."},
                "step": {"type": "object",
                         "description": "Present where the value is one step of the chain "
                                        "rule: in chain_rule's entry for call `run`, line "
                                        "`line`, term `term` (null: the gradient g the line "
                                        "starts from); `total`: the sum of a tensor's shares, "
                                        "complete after that term.",
                         "properties": {"run": {"type": "integer", "minimum": 1},
                                        "line": {"type": "integer", "minimum": 0},
                                        "term": {"type": ["integer", "null"], "minimum": 0},
                                        "total": {"type": "boolean"}},
                         "required": ["run", "line", "term", "total"],
                         "additionalProperties": False},
            },
            "required": ["name", "shape", "meaning", "check"],
            "anyOf": [{"required": ["value"]}, {"required": ["summary"]}],
        },
        "values": {
            "description": "Full-precision numbers as nested lists, one level per dimension (a "
                           "number for a 0-d tensor); booleans for a bool tensor. As a whole: "
                           "null where the argument is None; inside the lists: null for a "
                           "non-finite value (inf, -inf, nan).",
            "type": ["number", "boolean", "null", "array"],
            "items": {"$ref": "#/$defs/values"},
        },
        "summary": {
            "description": "A large tensor, recorded as four figures when a hook saw it; null "
                           "for a non-finite figure.",
            "type": "object",
            "properties": {key: {"type": ["number", "null"]}
                           for key in ("min", "max", "mean", "norm")},
            "required": ["min", "max", "mean", "norm"],
        },
        "meaning": {
            "description": "Which derivative the argument is: d`of`/d`wrt`, in `layout`.",
            "type": "object",
            "properties": {
                "of": {"type": "string", "description": "The differentiated tensor."},
                "wrt": {"type": "string",
                        "description": "The canonical tensor name: the top-level name if the "
                                       "tensor has one, else the module-qualified name. "
                                       "Two distinct tensors of a walk never share it."},
                "aliases": {"type": "array", "items": {"type": "string"},
                            "description": "The tensor's other names."},
                "layout": {"enum": _enum(Layout)},
                "text": {"type": "string", "description": "The label, e.g. ∂z/∂t."},
                "latex": {"type": "string"},
                "modified": {"const": True,
                             "description": "Present only where a hook (an intervention, or "
                                            "the user's own) changed the value."},
                "modified_by": {"type": "string",
                                "description": "Present only where the user's own hook changed "
                                               "the value (then it is not checked): the hook's "
                                               "function."},
                "kind": {"enum": ["zero", "stale"],
                         "description": "Present only where the claim is not a derivative's "
                                        "value: zeros torch hands on where no gradient flows, "
                                        "or a stale grad_output kept from an earlier call."},
                "via": {"type": "array", "items": {"$ref": "#/$defs/use"},
                        "description": "Present only where the value is some uses' share of "
                                       "the gradient (for layout summed: the expand)."},
                "summed_dims": {"type": "array", "items": {"type": "integer", "minimum": 0},
                                "description": "Layout summed: the broadcast dims to sum over."},
                "runs": {"type": "array", "items": {"type": "integer", "minimum": 1},
                         "description": "The backward calls a .grad holds, when several."},
                "stale_from": {"type": "integer", "minimum": 1,
                               "description": "Kind stale: the call that left the value."},
            },
            "required": ["of", "wrt", "aliases", "layout", "text", "latex"],
        },
        "use": {
            "description": "One use of the tensor: the op reading it, by its output's name, "
                           "and the operand, where the op reads the tensor more than once and "
                           "only one read is meant.",
            "type": "object",
            "properties": {"by": {"type": "string"},
                           "operand": {"type": ["integer", "null"], "minimum": 0}},
            "required": ["by", "operand"],
        },
        "check": {
            "description": "The label computed again in a hook-free run and compared.",
            "type": "object",
            "properties": {
                "verified": {"type": "boolean"},
                "max_abs_err": {"type": ["number", "null"],
                                "description": "null when not finite (a failed check)."},
                "why": {"type": "string",
                        "description": "Present only where the claim cannot hold whatever "
                                       "the value (it names no tensor, or several)."},
            },
            "required": ["verified", "max_abs_err"],
        },
    }


def walk_schema() -> Schema:
    derived = Derived(closed=False)
    extra = {
        "runs": {"type": "array", "items": derived.of(RunStep),
                 "description": "Beyond the contract: every backward and autograd.grad call in "
                                "order, with each leaf's .grad before, added and after, and "
                                "torch's error explained."},
        "chain_rule": {"type": "array", "items": derived.of(Derivation),
                       "description": "Beyond the contract: the chain rule of each distinct "
                                      "backward or autograd.grad call, node by node from the "
                                      "output back to the leaves; an argument's `step` points "
                                      "into it."},
        "lessons": dict(derived.of(Lessons),
                        description="Beyond the contract: the vector-Jacobian-product, "
                                    "intervention and capture lessons the spec asks for."),
        "firing_order": {"type": "array", "items": derived.of(FiringOrder),
                         "description": "Beyond the contract, only with --order: each shown "
                                        "pass's first call, every hook call numbered with the "
                                        "rule that puts it there."},
    }
    contract = walk_pass_defs(derived)
    derived_defs = derived.sorted_defs()
    assert not set(contract) & set(derived_defs), "a $defs name used twice"
    return {
        "$schema": DRAFT,
        "title": WALK_SCHEMA,
        "description": "gradexplain walk SPEC --format json. The contract keys (required here) "
                       "do not change; new keys may be added, so every object allows more.",
        "type": "object",
        "properties": {
            "schema": {"const": WALK_SCHEMA},
            "torch": {"type": "string", "description": "torch.__version__ of the run."},
            "spec": {"type": "string", "description": "The spec or model walked."},
            "passes": {"type": "array", "items": {"$ref": "#/$defs/pass"}},
            **extra,
        },
        "required": ["schema", "torch", "spec", "passes"],
        "$defs": {**contract, **derived_defs},
    }


def walk_pass_defs(derived: Derived) -> dict[str, Schema]:
    """A walk/1 pass and everything it is made of (its user hooks derived into `derived`)."""
    return {
        "pass": {
            "description": "One pass: legacy (register_backward_hook) or full "
                           "(register_full_backward_pre_hook and register_full_backward_hook).",
            "type": "object",
            "properties": {
                "mode": {"enum": _enum(Mode)},
                "events": {"type": "array", "items": {"$ref": "#/$defs/event"}},
                "grads": {"type": "object", "additionalProperties": {"$ref": "#/$defs/values"},
                          "description": "The final .grad of every leaf after the pass, by "
                                         "canonical name (null: no .grad)."},
                "graph_changed": {"type": "string",
                                  "description": "Present only where this pass's hooks changed "
                                                 "what the model computes: how, in words."},
                "user_hooks": {"type": "array", "items": derived.of(UserHook),
                               "description": "Beyond the contract, present only for a model "
                                              "with hooks of its own: each, and whether this "
                                              "pass ran it (why not, if not)."},
                "refusals": {"type": "array", "items": {"$ref": "#/$defs/refusal"},
                             "description": "Beyond the contract: the modules torch refuses "
                                            "full backward hooks on (an in-place op on what "
                                            "the hooks wrap), left without them in the full "
                                            "pass; empty in the legacy pass."},
                "failed_runs": {"type": "array", "items": {"$ref": "#/$defs/failed_run"},
                                "description": "Beyond the contract, present only in a full "
                                               "pass where torch refused a call it did not "
                                               "refuse so in the legacy pass (a full "
                                               "backward hook of the model's own returning "
                                               "a gradient of another shape): each is a "
                                               "failed check."},
            },
            "required": ["mode", "events", "grads"],
        },
        "failed_run": {
            "description": "A backward or grad call torch refused in this pass alone.",
            "type": "object",
            "properties": {
                "run": {"type": "integer", "minimum": 1},
                "kind": {"enum": ["backward", "grad"]},
                "of": {"type": "string"},
                "category": {"type": "string", "description": "The exception's type name."},
                "message": {"type": "string", "description": "What torch said."},
            },
            "required": ["run", "kind", "of", "category", "message"],
            "additionalProperties": False,
        },
        "refusal": {
            "description": "A module torch refuses full backward hooks on, and why.",
            "type": "object",
            "properties": {
                "module": {"type": "string", "description": "The module path (\"\": the model)."},
                "reason": {"enum": _enum(RefusalReason),
                           "description": "input: changed in place during its forward; output: "
                                          "changed in place after it returned; aliased: shares "
                                          "memory with a tensor changed in place; return_type: "
                                          "returns a result torch's wrapper cannot rebuild "
                                          "(torch.return_types)."},
                "op": {"type": ["string", "null"],
                       "description": "The in-place op (add_, relu_); null if unseen; for "
                                      "return_type, the op whose result it is (sort)."},
                "operator": {"type": ["string", "null"],
                             "description": "Its Python spelling where the source shows one "
                                            "(+=)."},
                "where": {"type": ["string", "null"],
                          "description": "The module whose forward ran the op (\"\": the "
                                         "model; null: outside every module)."},
                "text": {"type": "string", "description": "The sentence the walk shows."},
            },
            "required": ["module", "reason", "op", "operator", "where", "text"],
        },
        "event": {
            "description": "One hook call.",
            "type": "object",
            "properties": {
                "seq": {"type": "integer", "minimum": 0},
                "phase": {"enum": _enum(Phase)},
                "hook": {"enum": _enum(HookKind)},
                "target": {"type": "string",
                           "description": "Module hooks: the module path (\"\" is the "
                                          "top-level model); tensor hooks: the tensor's name; "
                                          "node hooks: the node's id in the pass's graph."},
                "node": {"type": ["string", "null"],
                         "description": "The autograd node involved, where there is one."},
                "args": {"type": "array", "items": {"$ref": "#/$defs/argument"}},
                "user": {"type": "string",
                         "description": "Present only for a call of the user's own hook: its "
                                        "function's name."},
                "returned": {"type": ["array", "null"], "items": {"$ref": "#/$defs/argument"},
                             "description": "With user: what the hook returned in place of its "
                                            "arguments (null: it returned None)."},
                "changed": {"type": "boolean",
                            "description": "With user: whether what it returned (or edited in "
                                           "place) differs from what it received."},
            },
            "required": ["seq", "phase", "hook", "target", "node", "args"],
        },
        **contract_defs(),
    }


def diff_schema() -> Schema:
    derived = Derived(closed=False)
    row = {
        "description": "One argument name in both passes; a side is null when its hook has no "
                       "such argument or did not fire.",
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "same": {"type": "boolean"},
            "legacy": _nullable("argument"),
            "full": _nullable("argument"),
            "note": {"type": "string", "description": "Why the two differ (\"\" when the same)."},
        },
        "required": ["name", "same", "legacy", "full", "note"],
    }
    call = {
        "description": "One forward call of the module in one backward run.",
        "type": "object",
        "properties": {
            "run": {"type": "integer"},
            "call": {"type": "integer", "description": "1 for the module's first call, 2 for "
                                                       "its second..."},
            "legacy_seq": {"type": ["integer", "null"]},
            "full_seq": {"type": ["integer", "null"]},
            "rows": {"type": "array", "items": {"$ref": "#/$defs/row"}},
        },
        "required": ["run", "call", "legacy_seq", "full_seq", "rows"],
    }
    module = {
        "description": "One module's legacy and full backward hook calls side by side.",
        "type": "object",
        "properties": {
            "module": {"type": "string", "description": "Its path (\"\" is the top-level "
                                                        "model)."},
            "arguments": {"type": "array", "items": {"type": ["string", "null"]},
                          "description": "Canonical names of its forward's arguments (null: "
                                         "not a named tensor)."},
            "legacy_node": {"type": ["string", "null"],
                            "description": "The node the legacy hook sits on."},
            "first_output": {"type": ["string", "null"]},
            "step": {"type": ["string", "null"],
                     "description": "The forward step that made the first output."},
            "calls": {"type": "array", "items": {"$ref": "#/$defs/call"}},
            "findings": {"type": "array", "items": {
                "type": "object",
                "properties": {"kind": {"enum": _enum(FindingKind)}, "text": {"type": "string"}},
                "required": ["kind", "text"],
            }},
            "verdict": {"type": "string"},
        },
        "required": ["module", "arguments", "legacy_node", "first_output", "step", "calls",
                     "findings", "verdict"],
    }
    return {
        "$schema": DRAFT,
        "title": DIFF_SCHEMA,
        "description": "gradexplain diff SPEC --format json: legacy vs full backward hooks, "
                       "module by module. Each side of a row is an argument exactly as walk "
                       "JSON writes it. New keys may be added, so every object allows more.",
        "type": "object",
        "properties": {
            "schema": {"const": DIFF_SCHEMA},
            "torch": {"type": "string"},
            "spec": {"type": "string"},
            "modules": {"type": "array", "items": {"$ref": "#/$defs/module"}},
            "graph_changed": {"type": "string",
                              "description": "Present only where the full hooks changed what "
                                             "the model computes: how, in words."},
            "chain_rule": {"type": "array", "items": derived.of(Derivation),
                           "description": "The chain rule of each distinct call, as walk "
                                          "JSON writes it: a side's `step` points into it."},
        },
        "required": ["schema", "torch", "spec", "modules"],
        "$defs": {"module": module, "call": call, "row": row, **contract_defs(),
                  **derived.sorted_defs()},
    }


def distributed_schema() -> Schema:
    """`walk --ranks N --format json`: each rank's pass is walk/1's (its $defs the same), plus
    what the wrapping adds, written by hand as render/distributed_json.py builds it."""
    derived = Derived(closed=False)
    contract = walk_pass_defs(derived)
    values = {"$ref": "#/$defs/values"}
    check = _nullable("check")
    base = contract["pass"]
    rank_pass = {
        **base,
        "description": "One pass of one rank: walk/1's pass (its own walk, labelled and checked "
                       "against this rank's hook-free run), then what the wrapping adds.",
        "properties": {
            **base["properties"],
            "buckets": {"type": "array", "items": {"$ref": "#/$defs/bucket"},
                        "description": "DDP's communication hook calls, in order (empty under "
                                       "FSDP2 and where DDP all-reduced nothing)."},
            "scoped": {"type": "array", "items": {"$ref": "#/$defs/scoped"},
                       "description": "Hook arguments read as distributed values; an argument "
                                      "not listed is this rank's own derivative."},
            "distributed_grads": {"type": "array", "items": {"$ref": "#/$defs/distributed_grad"},
                                  "description": "Each leaf's .grad after the pass, whose it "
                                                 "is, checked."},
            "silent": {"type": "array", "items": {"$ref": "#/$defs/silent"},
                       "description": "Hooks the walk registered that never fired on this "
                                      "rank, and why."},
        },
        "required": [*base["required"], "buckets", "scoped", "distributed_grads", "silent"],
    }
    whose = {
        "description": "Whose derivative a value is and when it was taken.",
        "type": "object",
        "properties": {
            "scope": {"enum": _enum(Scope),
                      "description": "local: this rank's own loss's; sum or mean over ranks; "
                                     "mixed: an earlier call's mean plus this rank's own."},
            "text": {"type": "string", "description": "The same in words."},
            "when": {"type": "string",
                     "description": "When, relative to the all-reduce (or reduce-scatter)."},
            "rows": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0},
                     "minItems": 2, "maxItems": 2,
                     "description": "FSDP2: the rows [start, stop) of the parameter this rank's "
                                    "shard holds; else null."},
        },
        "required": ["scope", "text", "when", "rows"],
    }
    slot = {
        "description": "One parameter's slot in a bucket.",
        "type": "object",
        "properties": {
            "parameter": {"type": "string"},
            "before": {**values, "description": "As handed to the hook: this rank's own "
                                                "gradient, unless a hook of the user's changed "
                                                "it."},
            "before_check": check,
            "after": {**values, "description": "After the all-reduce, before the division: "
                                               "the sum over ranks (null: never completed)."},
            "after_check": check,
            "changed_by": {"type": ["string", "null"],
                           "description": "The user's hook that changed what this rank put "
                                          "in (then nothing is checked)."},
            "not_checked": {"type": "string",
                            "description": "Present only where the slot has no checks and no "
                                           "hook of the user's explains it: why."},
        },
        "required": ["parameter", "before", "before_check", "after", "after_check",
                     "changed_by"],
    }
    bucket = {
        "description": "One call of DDP's communication hook.",
        "type": "object",
        "properties": {
            "index": {"type": "integer", "minimum": 0},
            "run": {"type": "integer", "minimum": 1,
                    "description": "The backward call it belongs to."},
            "after_seq": {"type": ["integer", "null"],
                          "description": "The event of the pass it followed (null: before "
                                         "every event)."},
            "slots": {"type": "array", "items": {"$ref": "#/$defs/slot"}},
        },
        "required": ["index", "run", "after_seq", "slots"],
    }

    def read(description: str, fields: Schema) -> Schema:
        """A value read as distributed: its own fields, whose it is, its check (and why not)."""
        return {
            "description": description,
            "type": "object",
            "properties": {**fields, "whose": {"$ref": "#/$defs/whose"}, "check": check,
                           "not_checked": {"type": "string", "description": "Present only "
                                           "where there is no check: why."}},
            "required": [*fields, "whose", "check"],
        }

    scoped = read("One hook argument of the rank's pass read as a distributed value.",
                  {"seq": {"type": "integer", "minimum": 0},
                   "arg": {"type": "string", "description": "The argument's name."}})
    grad = read("A leaf's .grad after the pass on this rank.",
                {"name": {"type": "string"}, "value": values})
    silent = {
        "description": "A hook that never fired on this rank.",
        "type": "object",
        "properties": {"hook": {"enum": _enum(HookKind)}, "target": {"type": "string"},
                       "why": {"type": "string"}},
        "required": ["hook", "target", "why"],
    }
    rank = {
        "description": "One rank: its inputs and its passes.",
        "type": "object",
        "properties": {
            "rank": {"type": "integer", "minimum": 0},
            "inputs": {"type": "object", "additionalProperties": values,
                       "description": "This rank's value of each input, by name."},
            "passes": {"type": "array", "items": {"$ref": "#/$defs/rank_pass"}},
            "runs": {"type": "array", "items": derived.of(RunStep),
                     "description": "Every backward call of the rank's legacy pass in order, as "
                                    "walk/1's `runs`: each leaf's .grad around it (checked as "
                                    "the wrapping leaves it) and torch's error explained."},
        },
        "required": ["rank", "inputs", "passes"],
    }
    reference = {
        "description": "A leaf's gradient in single-process runs of each rank's inputs: what "
                       "every distributed value is checked against.",
        "type": "object",
        "properties": {"local": {"type": "array", "items": values,
                                 "description": "Rank by rank (null: no gradient reached it)."},
                       "mean": values},
        "required": ["local", "mean"],
    }
    pitfall = {
        "description": "What a user would get wrong here, shown with this walk's numbers.",
        "type": "object",
        "properties": {"key": {"type": "string"}, "title": {"type": "string"},
                       "text": {"type": "string"}},
        "required": ["key", "title", "text"],
    }
    ddp = dict(derived.of(DDPOptions), description="DDP's options as the spec set them "
                                                   "(null under FSDP2).")
    added = {"rank": rank, "rank_pass": rank_pass, "bucket": bucket, "slot": slot,
             "scoped": scoped, "distributed_grad": grad, "whose": whose, "silent": silent,
             "reference": reference, "pitfall": pitfall}
    derived_defs = derived.sorted_defs()
    assert not set(contract) & set(derived_defs) and not set(added) & set(contract)
    return {
        "$schema": DRAFT,
        "title": DISTRIBUTED_SCHEMA,
        "description": "gradexplain walk SPEC --ranks N --format json: each rank's walk under "
                       "DDP or FSDP2, each of its passes a walk/1 pass plus what the wrapping "
                       "adds. New keys may be added, so every object allows more.",
        "type": "object",
        "properties": {
            "schema": {"const": DISTRIBUTED_SCHEMA},
            "torch": {"type": "string"},
            "spec": {"type": "string"},
            "world_size": {"type": "integer", "minimum": 1},
            "wrap": {"enum": _enum(WrapKind)},
            "backend": {"type": "string", "description": "The process group's backend."},
            "ddp": {"anyOf": [ddp, {"type": "null"}]},
            "ranks": {"type": "array", "items": {"$ref": "#/$defs/rank"}},
            "reference": {"type": "object", "additionalProperties": {"$ref": "#/$defs/reference"},
                          "description": "By leaf name."},
            "pitfalls": {"type": "array", "items": {"$ref": "#/$defs/pitfall"}},
            "notes": {"type": "array", "items": {"type": "string"},
                      "description": "What the run noticed that is not a check."},
        },
        "required": ["schema", "torch", "spec", "world_size", "wrap", "backend", "ddp", "ranks",
                     "reference", "pitfalls", "notes"],
        "$defs": {**contract, **added, **derived_defs},
    }


def _object(description: str, properties: dict[str, Schema]) -> Schema:
    """An object schema requiring every key it lists."""
    return {"description": description, "type": "object", "properties": properties,
            "required": list(properties)}


def _array(ref: str) -> Schema:
    return {"type": "array", "items": {"$ref": f"#/$defs/{ref}"}}


def distributed_diff_schema() -> Schema:
    """render/distributed_diff_json.py's document, key by key."""
    seq = {"type": ["integer", "null"]}
    tensor: dict[str, Schema] = {
        "shape": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0}},
        "value": {"$ref": "#/$defs/values"}, "summary": {"$ref": "#/$defs/summary"}}
    either = [{"required": ["value"]}, {"required": ["summary"]}]
    whose = _object("Whose derivative a value under the wrapping is.", {
        "scope": {"enum": _enum(Scope)},
        "text": {"type": "string"},
        "when": {"type": "string", "description": "When it was taken, relative to the "
                                                  "all-reduce or reduce-scatter."},
        "rows": {"type": ["array", "null"], "items": {"type": "integer"},
                 "description": "FSDP2: the rows [start, stop) of the parameter this rank's "
                                "shard holds."},
    })
    argument = _object("One argument of a call on both sides.", {
        "name": {"type": "string"},
        "single": _nullable("argument"),
        "wrapped": _nullable("argument"),
        "same_value": {"type": "boolean"},
        "same_label": {"type": "boolean"},
        "whose": _nullable("whose"),
    })
    argument["properties"] |= {
        "whose_check": dict(_nullable("check"), description="Present where `whose` is: the "
                            "check of the value as whose says (null: not checked)."),
        "not_checked": {"type": "string", "description": "Present where whose has no check: "
                                                         "why."}}
    call = _object("One hook call: the occurrence-th call of hook on target (by the user's "
                   "function `user`, null: gradexplain's own) in one process and under the "
                   "wrapping.", {
                       "hook": {"enum": _enum(HookKind)},
                       "target": {"type": "string"},
                       "node": {"type": ["string", "null"],
                                "description": "A node hook's node, by the name autograd "
                                               "gives it; matched by it, not by target."},
                       "user": {"type": ["string", "null"]},
                       "occurrence": {"type": "integer", "minimum": 1},
                       "run": {"type": "integer", "minimum": 0},
                       "single_seq": seq,
                       "wrapped_seq": seq,
                       "kind": {"enum": _enum(ChangeKind)},
                       "args": _array("distributed_argument"),
                       "reason": {"type": "string", "description": "Why, in one line (\"\" "
                                                                   "where nothing changed)."},
                   })
    slot = _object("One parameter's slot in a DDP bucket.", {
        "parameter": {"type": "string"},
        "before": {"$ref": "#/$defs/tensor"}, "before_check": _nullable("check"),
        "after": {"$ref": "#/$defs/tensor"}, "after_check": _nullable("check"),
        "changed_by": {"type": ["string", "null"]},
    })
    slot["properties"]["not_checked"] = {"type": "string"}  # present only where there is a why
    bucket = _object("A call of DDP's communication hook, which only the wrapped run makes.", {
        "index": {"type": "integer", "minimum": 0},
        "run": {"type": "integer", "minimum": 0},
        "after_seq": seq,
        "slots": _array("slot"),
        "reason": {"type": "string"},
    })
    single_grad = dict(_object("A .grad in one process.", {
        **tensor, "check": _nullable("check")}), anyOf=either)
    single_grad["required"] = ["shape", "check"]
    wrapped_grad = dict(_object("A .grad under the wrapping.", {
        **tensor, "whose": {"$ref": "#/$defs/whose"}, "check": _nullable("check")}),
        anyOf=either)
    wrapped_grad["required"] = ["shape", "whose", "check"]
    wrapped_grad["properties"]["not_checked"] = {"type": "string"}
    grad = _object("A leaf's .grad after the pass in one process and under the wrapping.", {
        "name": {"type": "string"},
        "changed": {"type": "boolean", "description": "Read from whose, not the numbers."},
        "equal": {"type": "boolean", "description": "Whether the numbers agree all the same."},
        "single": {"anyOf": [single_grad, {"type": "null"}]},
        "wrapped": {"anyOf": [wrapped_grad, {"type": "null"}]},
        "reason": {"type": "string"},
    })
    passed = _object("One pass of one rank.", {
        "mode": {"enum": _enum(Mode)},
        "single_calls": {"type": "integer", "minimum": 0},
        "wrapped_calls": {"type": "integer", "minimum": 0},
        "calls": _array("distributed_call"),
        "buckets": _array("bucket"),
        "grads": _array("grad"),
    })
    input_ = dict(_object("One of the rank's inputs.", {"name": {"type": "string"}, **tensor}),
                  anyOf=either)
    input_["required"] = ["name", "shape"]
    rank = _object("One rank: each pass in one process and under the wrapping.", {
        "rank": {"type": "integer", "minimum": 0},
        "inputs": _array("input"),
        "passes": _array("distributed_pass"),
        "verdict": {"type": "string"},
    })
    tensor_def = dict(_object("A recorded tensor: `value`, or `summary` for one recorded as "
                              "a summary.", tensor), anyOf=either)
    tensor_def["required"] = ["shape"]
    return {
        "$schema": DRAFT,
        "title": DISTRIBUTED_DIFF_SCHEMA,
        "description": "gradexplain diff SPEC --ranks N --format json: each rank's "
                       "single-process walk beside its walk under DDP or FSDP2, hook call by "
                       "hook call. Each side of an argument is an argument exactly as walk "
                       "JSON writes it. New keys may be added, so every object allows more.",
        "type": "object",
        "properties": {
            "schema": {"const": DISTRIBUTED_DIFF_SCHEMA},
            "torch": {"type": "string"},
            "spec": {"type": "string"},
            "name": {"type": "string"},
            "world_size": {"type": "integer", "minimum": 1},
            "wrap": {"enum": ["ddp", "fsdp"]},
            "ranks": _array("rank"),
        },
        "required": ["schema", "torch", "spec", "name", "world_size", "wrap", "ranks"],
        "$defs": {"rank": rank, "input": input_, "distributed_pass": passed,
                  "distributed_call": call, "distributed_argument": argument, "whose": whose,
                  "bucket": bucket, "slot": slot, "grad": grad, "tensor": tensor_def,
                  **contract_defs()},
    }


def session_schema() -> Schema:
    derived = Derived(closed=True)
    session = derived.of(Session)
    return {
        "$schema": DRAFT,
        "title": SESSION_SCHEMA,
        "description": "gradexplain walk SPEC --save FILE: one captured run, read back by "
                       "--load. Objects inside `session` take exactly the keys listed, as "
                       "--load does.",
        "type": "object",
        "properties": {
            "schema": {"const": SESSION_SCHEMA},
            "gradexplain": {"type": "string", "description": "The version that saved it."},
            "session": session,
        },
        "required": ["schema", "gradexplain", "session"],
        "$defs": derived.sorted_defs(),
    }
