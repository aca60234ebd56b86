"""The one orchestrator: a model (a YAML spec or a Python model's builder) in, a Session out.

    build -> trace (legacy pass, full pass) -> label -> replay (the hook-free run)
          -> derive (the chain rule) -> check and pin (passes) -> lessons

`capture` is the whole of `gradexplain walk` before rendering; each stage is its own module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from gradexplain.capture.build import Builder, Wrap, build
from gradexplain.capture.derive import derivations
from gradexplain.capture.inplace import Probe, probe_inplace
from gradexplain.capture.label import label_pass
from gradexplain.capture.lessons import lessons_for
from gradexplain.capture.passes import checked_pass, failed_alone, graph_change, run_steps
from gradexplain.capture.pins import Pins
from gradexplain.capture.remembered import remembering
from gradexplain.capture.replay import Replay, ReplayMismatch
from gradexplain.capture.trace import trace
from gradexplain.capture.usercode import blamed_on_user
from gradexplain.capture.values import value_limit
from gradexplain.collector import collector_paused
from gradexplain.errors import (
    HookRefusedError,
    HookValueError,
    ModelRunError,
    SpecRunError,
    UsageError,
    first_line,
    first_line_of,
)
from gradexplain.language.model import ModelSpec
from gradexplain.output_path import WHOLE, OutputPath, parse_output_path, path_text
from gradexplain.records.names import Naming, canonical_name
from gradexplain.records.paths import module_title
from gradexplain.records.session import Session, forward_steps
from gradexplain.records.trace import PYTHON_VALUE_LIMIT, PassTrace, Refusal
from gradexplain.records.walk import Walk
from gradexplain.threads import DEFAULT_THREADS, torch_threads

# The stages `capture` reports to its `progress` callback, in order (for a progress bar).
STAGES = ("legacy pass", "full pass", "labels", "check run", "chain rule", "checks: legacy",
          "checks: full", "lessons")
Progress = Callable[[str], None]


def capture(spec: ModelSpec, spec_path: str, spec_text: str, make: Builder | None = None,
            max_values: int | None = None, progress: Progress | None = None,
            threads: int | None = DEFAULT_THREADS, wrap: Wrap | None = None) -> Session:
    """Everything a renderer needs about the spec's run, to render now or save for later.
    `make` builds a Python model (see `pymodel`); a YAML spec is built from the spec.
    Tensors above `max_values` elements are recorded as summaries (default 10,000).
    `progress` is told each stage of STAGES as it starts. torch runs with `threads` intra-op
    threads (None: as the caller has it), and the caller's setting is restored afterwards."""
    # The collector paused: a capture makes hundreds of thousands of small objects while torch
    # holds as many alive, and its full sweeps took a fifth to a third of a deep model's
    # capture; the capture makes few cycles, collected once it is back on.
    with torch_threads(threads), value_limit(max_values), collector_paused():
        result, traces = _walk(spec, spec_path, make, progress or _silent, wrap)
    return Session(spec_text, tuple(item.name for item in spec.inputs), forward_steps(spec),
                   traces, result)


def _silent(stage: str) -> None:
    pass


def _walk(spec: ModelSpec, spec_path: str, make: Builder | None, progress: Progress,
          wrap: Wrap | None = None) -> tuple[Walk, tuple[PassTrace, ...]]:
    fresh = make or (lambda: build(spec))
    traced = fresh if wrap is None else (lambda: wrap(fresh()))
    # Each summary and check statistic computed once per distinct tensor (`remembered`), in
    # both passes and the checks: they see the same values many times.
    with remembering():
        progress(STAGES[0])
        legacy = trace(traced(), "legacy")
        progress(STAGES[1])
        full = _full_pass(traced, fresh)
        return _label_and_check(spec, spec_path, legacy, full, fresh, progress), (legacy, full)


def _full_pass(traced: Builder, fresh: Builder) -> PassTrace:
    """The full pass, with full hooks on every module torch takes them on. Most models have no
    in-place op on what full hooks wrap, and pay nothing for it: only when torch refuses does a
    probe forward (`inplace`) find the modules to leave without full hooks, and the pass runs
    again. If torch refuses still (an in-place op the probe could not tie to a call), once more
    without them on every call whose tensors an in-place op touched; if that fails too, a clear
    error rather than a model refused for a hint it cannot act on. Any other failure of the pass
    is probed too: a module returning a result torch's wrapper cannot rebuild
    (`torch.return_types`) is left without full hooks, and the pass run again once."""
    attempts: list[tuple[Refusal, ...]] = [()]
    probe: Probe | None = None
    tried: tuple[Refusal, ...] = ()
    message = ""
    while attempts:
        tried = attempts.pop(0)
        try:
            full = trace(traced(), "full", tried)
        except (ModelRunError, SpecRunError) as error:
            message = first_line(error.__cause__ or error)
            if not _hook_view_error(message):
                # Torch's wrapper may have failed on a result it cannot rebuild: then the
                # probe finds the module, and the pass is run again without its full hooks.
                probe = probe or probe_inplace(fresh)
                if tried or not any(item.reason == "return_type" for item in probe.refusals):
                    raise
                attempts = [probe.refusals]
                continue
        else:
            refused_run = next((run.error for run in full.runs if run.error is not None
                                and _hook_view_error(run.error.message)), None)
            if refused_run is None:
                return full
            message = first_line_of(refused_run.message)
        if probe is None:
            probe = probe_inplace(fresh)
            wider = probe.refusals + probe.wider
            attempts = [item for item in dict.fromkeys((probe.refusals, wider)) if item]
    refused = ", ".join(module_title(item.module) for item in tried) or "no module"
    raise HookRefusedError(
        "torch refused full backward hooks on this model (a BackwardHookFunction view was "
        f"changed in place) after gradexplain left them off {refused}: the in-place op could "
        f"not be tied to a module call. torch said: {message}")


def _hook_view_error(message: str) -> bool:
    """torch's refusal of an in-place change to a full hook's view (or its base)."""
    return "created inside a custom function" in message.lower()


def _label_and_check(spec: ModelSpec, spec_path: str, legacy: PassTrace, full: PassTrace,
                     make: Builder, progress: Progress) -> Walk:
    progress(STAGES[2])
    naming = walk_naming((legacy, full), whole=spec.python is not None)
    labelled = [label_pass(trace, naming) for trace in (legacy, full)]
    view, _ = labelled[0]
    progress(STAGES[3])
    shapes = [pass_view.signature() for pass_view, _ in labelled]
    replay = Replay(spec, legacy, shapes[0], make)
    full_replay: Replay | ReplayMismatch = replay
    changed = graph_change(shapes[0], shapes[1])
    if changed is not None:
        # The full hooks made the model compute something else: the full pass is checked on
        # a run with the same (inert) hooks, so that its graph is the pass's own.
        wrapped = frozenset(call.module for call in full.calls)
        try:
            full_replay = Replay(spec, full, shapes[1], make, wrapped)
        except ReplayMismatch as mismatch:
            full_replay = mismatch
    progress(STAGES[4])
    chain_rule = derivations(spec, legacy, view, replay, naming)
    pins = Pins.of(chain_rule)
    passes = []
    for stage, trace_, (pass_view, events), pass_replay in zip(
            STAGES[5:7], (legacy, full), labelled, (replay, full_replay), strict=True):
        progress(stage)
        # A full pass whose graph changed has other ranks than the derivation's: left unpinned.
        pass_pins = pins if trace_ is legacy or changed is None else None
        passes.append(checked_pass(trace_, pass_view, events, pass_replay, pass_pins))
    if changed is not None:
        passes[1] = replace(passes[1], graph_changed=changed)
    passes[1] = replace(passes[1], failed_runs=failed_alone(full, legacy))
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
                   threads: int | None = DEFAULT_THREADS, output: str | None = None) -> Session:
    """`gradexplain walk FILE.py:NAME --input 4x3`: load the model (running the user's code,
    by their choice), make or load its inputs, and capture the session. `output` is the
    `--loss-of` path (None: the whole output)."""
    from gradexplain.capture.pymodel import (
        check_arity,
        load_inputs,
        load_model,
        parse_input,
        random_inputs,
    )

    if shapes and inputs_file is not None:
        raise UsageError("give --input shapes or --inputs FILE, not both")
    # Typos are reported before user code runs.
    parsed = [parse_input(text) for text in shapes]
    path = WHOLE if output is None else parse_output_path(output)
    with blamed_on_user(target):  # import and factory say what failed; this is for the rest
        model = load_model(target)
        tensors = load_inputs(inputs_file) if inputs_file is not None else random_inputs(parsed)
        check_arity(model, len(tensors), target)
    given = (f"--inputs {inputs_file}" if inputs_file is not None
             else " ".join(f"--input {item.text}" for item in parsed))
    selected = "" if output is None else f" --loss-of {path_text(path)}"
    command = f"gradexplain walk {target} {given}{selected} --loss {loss}"
    grads = (None if inputs_file is not None
             else [item.requires_grad for item in parsed])
    return capture_module(model, tensors, target, loss,
                          PYTHON_VALUE_LIMIT if max_values is None else max_values, command,
                          progress, threads, output=path, requires_grad=grads)


def capture_module(model: nn.Module, inputs: tuple[torch.Tensor, ...], target: str, loss: str,
                   max_values: int | None, command: str | None,
                   progress: Progress | None, threads: int | None, *,
                   output: OutputPath = WHOLE,
                   requires_grad: Sequence[bool] | None = None) -> Session:
    """A Python model on these inputs, `loss` ("sum" or "mean") of the part `output` of its
    output backpropagated; `requires_grad`, input by input (None: the floating ones): the model
    becomes a ModelSpec and identical builds (`pymodel`), then `capture`."""
    from gradexplain.capture.pymodel import python_source

    if loss not in ("sum", "mean"):
        raise UsageError(f"loss {loss!r}: use 'sum' or 'mean'")
    # The user's code runs in every stage (forwards, hooks, deep copies): what it raises or
    # exits with there is said in one line, with the stage and the place in their file.
    with blamed_on_user(target, "set-up") as stage:
        source = python_source(model, inputs, target, loss, command,  # type: ignore[arg-type]
                               output, requires_grad)
        try:
            return capture(source.spec, target, source.description, source.build, max_values,
                           stage.track(progress), threads)
        except HookValueError as error:  # met in a hook, which knows no model name
            raise ModelRunError(f"{target}: {error}") from error


__all__ = ["STAGES", "Progress", "capture", "capture_module", "capture_target"]
