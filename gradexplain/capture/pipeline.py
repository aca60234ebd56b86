"""The one orchestrator: a model (a YAML spec or a Python model's builder) in, a Session out.

    build -> trace (legacy pass, full pass) -> label -> replay (the hook-free run)
          -> check (passes) -> derive (the chain rule) -> lessons

`capture` is the whole of `gradexplain walk` before rendering; each stage is its own module.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from gradexplain.capture.build import Builder, build
from gradexplain.capture.derive import derivations
from gradexplain.capture.label import label_pass
from gradexplain.capture.lessons import lessons_for
from gradexplain.capture.passes import checked_pass, run_steps
from gradexplain.capture.replay import Replay
from gradexplain.capture.trace import trace, value_limit
from gradexplain.errors import UsageError
from gradexplain.language.model import ModelSpec
from gradexplain.records.names import Naming, canonical_name
from gradexplain.records.session import Session, forward_steps
from gradexplain.records.trace import PYTHON_VALUE_LIMIT, PassTrace
from gradexplain.records.walk import Walk
from gradexplain.threads import DEFAULT_THREADS, torch_threads

# The stages `capture` reports to its `progress` callback, in order (for a progress bar).
STAGES = ("legacy pass", "full pass", "labels", "check run", "checks: legacy",
          "checks: full", "chain rule", "lessons")
Progress = Callable[[str], None]


def capture(spec: ModelSpec, spec_path: str, spec_text: str, make: Builder | None = None,
            max_values: int | None = None, progress: Progress | None = None,
            threads: int | None = DEFAULT_THREADS) -> Session:
    """Everything a renderer needs about the spec's run, to render now or save for later.
    `make` builds a Python model (see `pymodel`); a YAML spec is built from the spec.
    Tensors above `max_values` elements are recorded as summaries (default 10,000).
    `progress` is told each stage of STAGES as it starts. torch runs with `threads` intra-op
    threads (None: as the caller has it), and the caller's setting is restored afterwards."""
    with torch_threads(threads), value_limit(max_values), _collector_paused():
        result, traces = _walk(spec, spec_path, make, progress or _silent)
    return Session(spec_text, tuple(item.name for item in spec.inputs), forward_steps(spec),
                   traces, result)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the capture, as it was afterwards. A capture
    makes hundreds of thousands of small objects while torch holds as many alive, so the
    collector's full sweeps took a fifth to a third of a deep model's capture; the capture
    makes few cycles, and they are collected when it is back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _silent(stage: str) -> None:
    pass


def _walk(spec: ModelSpec, spec_path: str, make: Builder | None,
          progress: Progress) -> tuple[Walk, tuple[PassTrace, ...]]:
    fresh = make or (lambda: build(spec))
    progress(STAGES[0])
    legacy = trace(fresh(), "legacy")
    progress(STAGES[1])
    full = trace(fresh(), "full")
    return _label_and_check(spec, spec_path, legacy, full, fresh, progress), (legacy, full)


def _label_and_check(spec: ModelSpec, spec_path: str, legacy: PassTrace, full: PassTrace,
                     make: Builder, progress: Progress) -> Walk:
    progress(STAGES[2])
    naming = walk_naming((legacy, full), whole=spec.python is not None)
    labelled = [label_pass(trace, naming) for trace in (legacy, full)]
    view, _ = labelled[0]
    progress(STAGES[3])
    replay = Replay(spec, legacy, [view.name_of(node) for node in view.order], make)
    passes = []
    for stage, trace_, (pass_view, events) in zip(STAGES[4:6], (legacy, full), labelled,
                                                   strict=True):
        progress(stage)
        passes.append(checked_pass(trace_, pass_view, events, replay))
    progress(STAGES[6])
    chain_rule = derivations(spec, legacy, view, replay, naming)
    runs = run_steps(spec, legacy, view, replay)
    progress(STAGES[7])
    return Walk(
        spec=spec_path,
        name=spec.name,
        about=spec.about,
        torch=torch.__version__,
        passes=tuple(passes),
        derivations=chain_rule,
        interventions=len(spec.interventions),
        runs=runs,
        lessons=lessons_for(spec),
        whole_names=naming.whole,
        short_names=naming.shorts,
    )


def walk_naming(traces: Sequence[PassTrace], whole: bool) -> Naming:
    """One naming for the whole walk, from every tensor name of both passes: each tensor's
    short name is told apart from all of them (records.names.Naming)."""
    canonical = (canonical_name(record.names) for trace in traces for record in trace.tensors)
    return Naming.of((name for name in canonical if name is not None), whole)


def capture_target(target: str, shapes: Sequence[str], inputs_file: Path | None, loss: str,
                   max_values: int | None, progress: Progress | None = None,
                   threads: int | None = DEFAULT_THREADS) -> Session:
    """`gradexplain walk FILE.py:NAME --input 4x3`: load the model (running the user's code,
    by their choice), make or load its inputs, and capture the session."""
    from gradexplain.capture.pymodel import (
        check_arity,
        load_inputs,
        load_model,
        parse_input,
        random_inputs,
    )

    if shapes and inputs_file is not None:
        raise UsageError("give --input shapes or --inputs FILE, not both")
    parsed = [parse_input(text) for text in shapes]  # a typo is reported before user code runs
    model = load_model(target)
    tensors = load_inputs(inputs_file) if inputs_file is not None else random_inputs(parsed)
    check_arity(model, len(tensors), target)
    given = (f"--inputs {inputs_file}" if inputs_file is not None
             else " ".join(f"--input {item.text}" for item in parsed))
    command = f"gradexplain walk {target} {given} --loss {loss}"
    return capture_module(model, tensors, target, loss,
                          PYTHON_VALUE_LIMIT if max_values is None else max_values, command,
                          progress, threads)


def capture_module(model: nn.Module, inputs: tuple[torch.Tensor, ...], target: str, loss: str,
                   max_values: int | None, command: str | None,
                   progress: Progress | None, threads: int | None) -> Session:
    """A Python model on these inputs, `loss` ("sum" or "mean") of its output backpropagated:
    the model becomes a ModelSpec and identical builds (`pymodel`), then `capture`."""
    from gradexplain.capture.pymodel import python_source

    if loss not in ("sum", "mean"):
        raise UsageError(f"loss {loss!r}: use 'sum' or 'mean'")
    source = python_source(model, inputs, target, loss, command)  # type: ignore[arg-type]
    return capture(source.spec, target, source.description, source.build, max_values, progress,
                   threads)


__all__ = ["STAGES", "Progress", "capture", "capture_module", "capture_target"]
