"""Whether a decoded session hangs together: every index, id and name one record uses to point at
another points at something that is there. The codec (records/codec.py) checks each value's
type; this checks what the types cannot say, so that a session that passes renders whole in
every format (walk, diff, report) instead of failing half-way with an IndexError. No torch here.

What it checks is what the renderers and analysis/ rely on, found by mutating real saved
sessions (tests/records/test_session_consistency.py): both passes, once each and in order; a
trace's tensors numbered by their place, its graph's ids unique and every edge, tensor, call
and event pointing into it; the same module calls in both passes; every event's run and call
in range, module hooks on modules that were called; every hook argument named as its hook kind
names them; pins on a step of the chain rule; runs numbered from 1 and the walk's run numbers
among them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from gradexplain.records.codec import DecodeError
from gradexplain.records.trace import PassTrace, TensorValue
from gradexplain.records.walk import Derivation, LabelledArg, PassWalk, Walk

if TYPE_CHECKING:
    from gradexplain.records.session import Session

KeyPath = tuple[str | int, ...]
MODES = ("legacy", "full")
MODULE_HOOKS = ("forward_pre", "forward", "backward", "full_backward_pre", "full_backward")
# The names each hook kind gives its arguments (capture/trace.py): `prefix[i]` for an item of a
# tuple, the prefix alone for a lone value (a forward's one output, a tensor hook's grad, what a
# user's hook received or returned). diff reads a backward hook's names as a kind and a position
# (analysis/diff.py), so nothing else may load.
ARGUMENT_NAMES: dict[str, tuple[str, ...]] = {
    "forward_pre": ("input",),
    "forward": ("input", "output"),
    "backward": ("grad_input", "grad_output"),
    "full_backward": ("grad_input", "grad_output"),
    "full_backward_pre": ("grad_output",),
    "tensor": ("grad",),
    "post_accumulate_grad": ("tensor",),
    "node_pre": ("grad_outputs",),
    "node": ("grad_inputs", "grad_outputs"),
}
# Said without a position in the message, as gradexplain's own hooks name them.
_LONE = ("output", "grad", "tensor")
# A position as str() writes it (no leading zeros: `[01]` and `[1]` would be one place), and
# short enough for int(): a hook's arguments are a tuple, never a billion long.
_ARGUMENT_NAME = {hook: re.compile(f"(?:{'|'.join(names)})(?:\\[(?:0|[1-9][0-9]{{0,8}})\\])?")
                  for hook, names in ARGUMENT_NAMES.items()}


def check(session: Session) -> None:
    """DecodeError (its path inside the session) for the first thing that does not hang
    together."""
    _values(session, ())
    _modes([trace.mode for trace in session.traces], ("traces",))
    _modes([walk_pass.mode for walk_pass in session.walk.passes], ("walk", "passes"))
    for number, trace in enumerate(session.traces):
        _trace(trace, ("traces", number))
    legacy, full = session.traces
    _same_calls(legacy, full)
    _walk(session.walk, session.traces)


def _values(record: object, path: KeyPath) -> None:
    """Every recorded tensor value in the session holds as many numbers, nested as deep, as its
    shape says (a hand-edited `{"shape": [3, 3], "value": 5.0}` would render as a 3x3
    tensor), or a summary of them; found wherever the records keep one."""
    if isinstance(record, TensorValue):
        if record.value is None:
            if record.summary is None:
                raise _fail("a recorded tensor with neither values nor a summary", path)
        elif not _fits(record.value, record.shape, record.dtype == "bool"):
            raise _fail(f"values that do not fit the shape {list(record.shape)}",
                        (*path, "value"))
    elif isinstance(record, (tuple, list)):
        for place, item in enumerate(record):
            if not isinstance(item, _ATOMS):
                _values(item, (*path, place))
    elif dataclasses.is_dataclass(record):
        for name in _field_names(type(record)):
            item = getattr(record, name)
            if not isinstance(item, _ATOMS):
                _values(item, (*path, name))


# What holds no recorded value: skipped without a call (a deep model's session has millions).
_ATOMS = (str, int, float, type(None))
_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(field.name for field in dataclasses.fields(kind))
    return names


def _fits(value: object, shape: tuple[int, ...], booleans: bool) -> bool:
    """Whether nested lists hold numbers (`booleans`: true and false) in exactly `shape` (one
    alone for shape ())."""
    if not shape:
        return isinstance(value, bool) if booleans else (
            isinstance(value, (int, float)) and not isinstance(value, bool))
    return (isinstance(value, list) and len(value) == shape[0]
            and all(_fits(item, shape[1:], booleans) for item in value))


def _fail(message: str, path: KeyPath) -> DecodeError:
    return DecodeError(message, path)


def _modes(modes: list[str], path: KeyPath) -> None:
    if tuple(modes) != MODES:
        raise _fail(f"expected the legacy pass, then the full pass; got {modes or 'none'}", path)


def _index(value: int | None, size: int, what: str, path: KeyPath) -> None:
    """`value` is None or an index into a list of `size` items."""
    if value is not None and not 0 <= value < size:
        raise _fail(f"{what} {value} is not one of the {size} there are", path)


def _member(value: str | None, known: Collection[str], what: str, path: KeyPath) -> None:
    if value is not None and value not in known:
        raise _fail(f"no {what} {_short(value)}", path)


def _short(text: str) -> str:
    from gradexplain.errors import quoted

    return quoted(text, 40)


def _unique(items: Iterable[object], what: str, path: KeyPath) -> None:
    seen: set[object] = set()
    for number, item in enumerate(items):
        if item in seen:
            raise _fail(f"{what} {item!r} given twice" if not isinstance(item, str) else
                        f"{what} {_short(item)} given twice", (*path, number))
        seen.add(item)


def _trace(trace: PassTrace, path: KeyPath) -> None:
    tensors = len(trace.tensors)
    for number, record in enumerate(trace.tensors):
        if record.index != number:
            raise _fail(f"tensor {record.index} listed at place {number}",
                        (*path, "tensors", number, "index"))
    ids = [node.id for node in trace.graph]
    _unique(ids, "node id", (*path, "graph"))
    known = set(ids)
    for number, node in enumerate(trace.graph):
        where = (*path, "graph", number)
        for edge, (child, _) in enumerate(node.next):
            _member(child, known, "graph node", (*where, "next", edge, 0))
        _index(node.variable, tensors, "tensor", (*where, "variable"))
    for number, record in enumerate(trace.tensors):
        _member(record.node, known, "graph node", (*path, "tensors", number, "node"))
    for number, call in enumerate(trace.calls):
        where = (*path, "calls", number)
        for key in ("inputs", "outputs", "arguments"):
            for place, index in enumerate(getattr(call, key)):
                _index(index, tensors, "tensor", (*where, key, place))
        _member(call.legacy_node, known, "graph node", (*where, "legacy_node"))
        _index(call.returns_argument, tensors, "tensor", (*where, "returns_argument"))
        _index(call.legacy_output, tensors, "tensor", (*where, "legacy_output"))
        for place, (_, index) in enumerate(call.keywords):
            _index(index, tensors, "tensor", (*where, "keywords", place, 1))
    _runs(trace, tensors, path)
    _events(trace, path)


def _runs(trace: PassTrace, tensors: int, path: KeyPath) -> None:
    for number, run in enumerate(trace.runs):
        if run.index != number + 1:
            raise _fail(f"run {run.index} listed as run {number + 1} (runs count from 1)",
                        (*path, "runs", number, "index"))
        _index(run.root, tensors, "tensor", (*path, "runs", number, "root"))


def _events(trace: PassTrace, path: KeyPath) -> None:
    _unique([event.seq for event in trace.events], "event number", (*path, "events"))
    modules = {call.module for call in trace.calls}
    known = {node.id for node in trace.graph}
    for number, event in enumerate(trace.events):
        where = (*path, "events", number)
        _index(event.run, len(trace.runs) + 1, "run", (*where, "run"))
        _hook_target(event.hook, event.target, modules, (*where, "target"))
        _member(event.node_id, known, "graph node", (*where, "node_id"))
        for key, args in (("args", event.args), ("returned", event.returned or ())):
            for place, arg in enumerate(args):
                _index(arg.tensor, len(trace.tensors), "tensor", (*where, key, place, "tensor"))
                _argument_name(event.hook, arg.name, (*where, key, place, "name"))
    seqs = {event.seq for event in trace.events}
    for number, warning in enumerate(trace.warnings):
        if warning.after_seq is not None and warning.after_seq not in seqs:
            raise _fail(f"no event {warning.after_seq}",
                        (*path, "warnings", number, "after_seq"))


def _hook_target(hook: str, target: str, modules: Collection[str], path: KeyPath) -> None:
    """A module hook's target is a module the pass called (the model itself is '')."""
    if hook in MODULE_HOOKS and target not in modules:
        raise _fail(f"a {hook} hook on module {_short(target)}, which is not among the pass's "
                    "module calls", path)


def _argument_name(hook: str, name: str, path: KeyPath) -> None:
    pattern = _ARGUMENT_NAME.get(hook)
    if pattern is not None and pattern.fullmatch(name) is None:
        shown = " or ".join(prefix if prefix in _LONE else f"{prefix}[i]"
                            for prefix in ARGUMENT_NAMES[hook])
        raise _fail(f"a {hook} hook's argument named {_short(name)}; that hook's arguments are "
                    f"{shown}", path)


def _same_calls(legacy: PassTrace, full: PassTrace) -> None:
    """Both passes ran the same forward: the same module calls, in the same order (diff pairs
    a full hook call with the legacy module call of the same number)."""
    modules = [call.module for call in legacy.calls]
    for number, call in enumerate(full.calls):
        if number >= len(modules) or call.module != modules[number]:
            raise _fail("the full pass's module calls differ from the legacy pass's",
                        ("traces", 1, "calls", number))
    if len(full.calls) != len(modules):
        raise _fail(f"{len(full.calls)} module calls, the legacy pass has {len(modules)}",
                    ("traces", 1, "calls"))


def _walk(walk: Walk, traces: tuple[PassTrace, ...]) -> None:
    runs = len(traces[0].runs)
    derivations = {derivation.run: derivation for derivation in walk.derivations}
    _unique([derivation.run for derivation in walk.derivations], "run",
            ("walk", "derivations"))
    for number, derivation in enumerate(walk.derivations):
        where = ("walk", "derivations", number)
        for run in (derivation.run, *derivation.repeats):
            _index(run - 1, runs, "run", (*where, "run"))
    for number, step in enumerate(walk.runs):
        _index(step.run - 1, runs, "run", ("walk", "runs", number, "run"))
    for number, (walk_pass, trace) in enumerate(zip(walk.passes, traces, strict=True)):
        _pass(walk_pass, trace, derivations, ("walk", "passes", number))


def _pass(walk_pass: PassWalk, trace: PassTrace, derivations: dict[int, Derivation],
          path: KeyPath) -> None:
    modules = {call.module for call in trace.calls}
    _unique([event.seq for event in walk_pass.events], "event number", (*path, "events"))
    for number, event in enumerate(walk_pass.events):
        where = (*path, "events", number)
        _index(event.run, len(trace.runs) + 1, "run", (*where, "run"))
        _index(event.call, len(trace.calls), "module call", (*where, "call"))
        _hook_target(event.hook, event.target, modules, (*where, "target"))
        if event.call is not None and trace.calls[event.call].module != event.target:
            raise _fail(f"module call {event.call} is a call of another module",
                        (*where, "call"))
        for key, args in (("args", event.args), ("returned", event.returned or ())):
            for place, arg in enumerate(args):
                _argument_name(event.hook, arg.name, (*where, key, place, "name"))
                _arg(arg, derivations, len(trace.runs), (*where, key, place))
    for number, refusal in enumerate(walk_pass.refusals):
        if refusal.module not in modules:
            raise _fail(f"module {_short(refusal.module)} is not among the pass's module calls",
                        (*path, "refusals", number, "module"))


def _arg(arg: LabelledArg, derivations: dict[int, Derivation], runs: int,
         path: KeyPath) -> None:
    if arg.meaning is not None:
        for place, run in enumerate(arg.meaning.runs):
            _index(run - 1, runs, "run", (*path, "meaning", "runs", place))
        if arg.meaning.stale_from is not None:
            _index(arg.meaning.stale_from - 1, runs, "run", (*path, "meaning", "stale_from"))
    pin = arg.pin
    if pin is None:
        return
    derivation = derivations.get(pin.run)
    if derivation is None:
        raise _fail(f"pinned to run {pin.run}, which has no chain rule", (*path, "pin", "run"))
    _index(pin.line, len(derivation.lines), "line", (*path, "pin", "line"))
    terms = len(derivation.lines[pin.line].terms)
    _index(pin.term, terms, "term", (*path, "pin", "term"))
