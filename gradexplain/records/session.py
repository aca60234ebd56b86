"""A session: one captured run (both passes' traces and everything walk found about them),
saved once as JSON and rendered many ways (`walk`, `diff`, `report`), the pyinstrument way.

No torch here: `--load` renders a saved session without importing torch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradexplain import __version__
from gradexplain.errors import SessionError, UsageError, quoted
from gradexplain.files import UnreadableFile, read_regular, write_atomic
from gradexplain.language.expr import Call, names_used
from gradexplain.language.model import ModelSpec, ModuleSpec
from gradexplain.records import consistency, jsontext
from gradexplain.records.codec import DecodeError, from_data, to_data
from gradexplain.records.trace import PassTrace
from gradexplain.records.walk import Walk
from gradexplain.safe_text import safe_text

SCHEMA = "gradexplain.session/2"
# The most a session file may be (`--load` reads it whole; parsing takes ~6x its size in RAM).
# Measured (2026-11-25): bench's 300 Linear(8, 8)+Tanh layers save 65.6 MB, 300 Linear(16, 16)
# layers 153 MB (a 3-minute capture); 300 Linear(100, 100) layers ran out of patience and RAM
# (10 GB after 12 minutes) long before a session. 500 MB holds 3x the largest seen.
MAX_SESSION_BYTES = 500_000_000


@dataclass(frozen=True)
class ForwardStep:
    """One step of the forward, as the spec wrote it, with module-qualified names.

    `operands` are the tensors it reads, `calls` the layer or module it calls (if any).
    """

    module: str
    targets: tuple[str, ...]
    text: str
    operands: tuple[str, ...]
    calls: str | None


@dataclass(frozen=True)
class Session:
    """Everything the renderers need, so nothing has to run again: the spec as written, its
    inputs (the model's arguments; every other leaf is a parameter), the forward steps, both
    passes' traces and the labelled, checked walk."""

    spec_text: str
    inputs: tuple[str, ...]
    forward: tuple[ForwardStep, ...]
    traces: tuple[PassTrace, ...]
    walk: Walk

    def trace(self, mode: str) -> PassTrace | None:
        return next((trace for trace in self.traces if trace.mode == mode), None)

    def passes(self, modes: Iterable[str]) -> list[PassTrace]:
        """The traces of the passes in `modes` that the session has, in that order."""
        return [trace for trace in map(self.trace, modes) if trace is not None]


def forward_steps(spec: ModelSpec) -> tuple[ForwardStep, ...]:
    """Every module's steps, in the order the modules are declared (the model's own last)."""
    steps: list[ForwardStep] = []
    for module in spec.root.all_modules()[1:] + [spec.root]:
        steps += _module_steps(module)
    return tuple(steps)


def _module_steps(module: ModuleSpec) -> list[ForwardStep]:
    callables = {layer.name for layer in module.layers} | {child.name for child in module.modules}
    steps = []
    for step in module.steps:
        expr = step.assignment.expr
        called = expr.func if isinstance(expr, Call) and expr.func in callables else None
        operands: list[str] = []
        for name in names_used(expr):
            if name.id in callables or _is_function(expr, name.id, callables):
                continue
            qualified = module.qualify(name.id)
            if qualified not in operands:
                operands.append(qualified)
        steps.append(ForwardStep(module.path, tuple(module.qualify(t) for t in step.targets),
                                 step.text, tuple(operands),
                                 None if called is None else module.qualify(called)))
    return steps


def _is_function(expr: object, name: str, callables: set[str]) -> bool:
    """Whether `name` is called somewhere in `expr` (a built-in function such as sigmoid)."""
    if isinstance(expr, Call):
        if expr.func == name:
            return True
        return any(_is_function(arg, name, callables) for arg in expr.args) or any(
            _is_function(value, name, callables) for _, value in expr.kwargs)
    for attribute in ("left", "right", "operand"):
        inner = getattr(expr, attribute, None)
        if inner is not None and _is_function(inner, name, callables):
            return True
    return False


def session_json(session: Session) -> dict[str, Any]:
    return {"schema": SCHEMA, "gradexplain": __version__, "session": to_data(session)}


def save_session(session: Session, path: Path) -> None:
    """Write the session as JSON to `path`, atomically (`files.write_atomic`)."""
    text = json.dumps(session_json(session), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)
    try:
        # safe_text escapes what json.dumps left as is (DEL, C1, bidi, a lone surrogate from a
        # model's extra_repr, which UTF-8 cannot encode) as JSON `\u` escapes: the same data.
        write_atomic(path, safe_text(text) + "\n")
    except (OSError, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise UsageError(f"--save {path}: cannot write it ({reason})") from error


def load_session(path: Path) -> Session:
    """Read a session saved by `walk --save`; SessionError (exit 2) for anything else."""
    return decode_session(read_session_text(path), str(path))


def read_session_text(path: Path) -> str:
    """A session file's text: a regular file of at most MAX_SESSION_BYTES, in UTF-8."""
    file = str(path)
    try:
        raw = read_regular(path, MAX_SESSION_BYTES, file)
    except UnreadableFile as problem:
        if problem.kind == "too large":
            raise SessionError(file, f"{problem.reason} (a 300-layer spec saves about "
                               "65 MB)") from None
        raise SessionError(file, f"cannot read it: {problem.reason}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SessionError(file, f"cannot read it: not UTF-8 text (byte {error.start})") from None


def decode_session(text: str, file: str) -> Session:
    """The session in a saved file's text, checked to be one the renderers can show whole
    (records/consistency.py); SessionError (exit 2) with the key path of what is wrong."""
    try:
        document = jsontext.parse(text)
    except json.JSONDecodeError as error:
        raise SessionError(file, f"not JSON (line {error.lineno}, column {error.colno}: "
                           f"{error.msg})") from error
    except jsontext.JsonTextError as error:
        raise SessionError(file, error.message, error.path) from error
    if not isinstance(document, dict) or "schema" not in document:
        raise SessionError(file, "no 'schema' key; save one with "
                           "`gradexplain walk SPEC --save FILE`")
    if document["schema"] != SCHEMA:
        # quoted: a 5 MB `schema` string must not make a 5 MB "one-line" error
        shown = quoted(document["schema"]) if isinstance(document["schema"], str) else (
            f"of type {type(document['schema']).__name__}")
        raise SessionError(file, f"schema {shown}, expected {SCHEMA!r} "
                           "(save it again with this version of gradexplain)")
    try:
        session = from_data(Session, document.get("session"))
        consistency.check(session)
    except DecodeError as error:
        raise SessionError(file, error.message, ("session", *error.path)) from error
    return session
