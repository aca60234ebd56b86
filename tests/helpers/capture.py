"""Captures for tests: a session from spec text, one cached capture per example spec, and the
pieces of a capture the tests drive alone (both passes' traces, a forward's named values, the
walk without the rest of the session). The package keeps none of these: they are the tests'."""

from __future__ import annotations

import functools
from typing import Any

from gradexplain.capture.build import Built, build, observe
from gradexplain.capture.pipeline import capture
from gradexplain.capture.trace import trace
from gradexplain.language import load_spec_text, read_spec_text
from gradexplain.language.model import ModelSpec
from gradexplain.records.session import Session
from gradexplain.records.trace import PassTrace
from gradexplain.records.walk import Walk
from tests.helpers.cli import SPECS


def capture_text(text: str, name: str) -> Session:
    """The session `gradexplain walk` captures for spec text `text` read from file `name`."""
    return capture(load_spec_text(text, name), name, text)


@functools.cache
def captured(spec_file: str) -> Session:
    """One capture per spec for the whole test run: the renderers' tests all read it."""
    name = f"specs/{spec_file}"
    return capture_text(read_spec_text(SPECS / spec_file), name)


def walk(spec: ModelSpec, spec_path: str) -> Walk:
    """Run the spec's two passes and everything walk shows about them."""
    return capture(spec, spec_path, "").walk


def trace_both(spec: ModelSpec) -> tuple[PassTrace, PassTrace]:
    """The legacy pass and the full pass, each on its own fresh build of `spec`."""
    return trace(build(spec), "legacy"), trace(build(spec), "full")


def run_forward(built: Built) -> tuple[Any, dict[str, Any]]:
    """Run the model once; return its output and every named value (first value of each name)."""
    values: dict[str, Any] = {}

    def record(name: str, value: Any) -> None:
        values.setdefault(name, value)

    with observe(record):
        output = built.model(*built.inputs)
    for name, tensor in built.model.named_parameters():
        values.setdefault(name, tensor)
    return output, values
