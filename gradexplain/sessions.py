"""Where a session comes from: a saved file, a YAML spec, or a Python model (FILE.py:NAME).

The command line's one way in. `open_source` does everything that needs no torch (the option
combinations, loading a saved session, reading and checking a spec), so a bad spec or option is
reported before torch is imported; `Source.capture` then runs `capture.pipeline`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gradexplain.errors import UsageError
from gradexplain.threads import DEFAULT_THREADS

if TYPE_CHECKING:
    from gradexplain.capture.pipeline import Progress
    from gradexplain.distributed.run import Plan
    from gradexplain.language.model import ModelSpec, WrapKind
    from gradexplain.records.distributed import DistributedWalk
    from gradexplain.records.session import Session


@dataclass(frozen=True)
class RunOptions:
    """How to run the spec or the Python model given on the command line (the inputs, the
    loss and the part of the output it is of are for a Python model only; a YAML spec declares
    its own). None: the default."""

    inputs: tuple[str, ...] = ()
    inputs_file: Path | None = None
    loss: str | None = None
    max_values: int | None = None
    threads: int | None = None
    output: str | None = None
    # `--ranks N` and `--wrap`: the model run in N processes under DDP or FSDP2 (distributed/).
    ranks: int | None = None
    wrap: str | None = None


NO_OPTIONS = RunOptions()


@dataclass(frozen=True)
class Source:
    """A model ready to capture: a checked YAML spec (`spec`, with the exact `text` that was
    read), or a Python target (`spec` None) whose code has not run yet."""

    target: str
    options: RunOptions
    spec: ModelSpec | None = None
    text: str = ""

    def capture(self, progress: Progress | None = None) -> Session:
        """Run it (torch): both passes, labels, checks, the chain rule and the lessons."""
        from gradexplain.capture import pipeline

        threads = DEFAULT_THREADS if self.options.threads is None else self.options.threads
        if self.spec is None:
            return pipeline.capture_target(self.target, self.options.inputs,
                                           self.options.inputs_file, self.options.loss or "sum",
                                           self.options.max_values, progress, threads,
                                           self.options.output)
        return pipeline.capture(self.spec, self.target, self.text,
                                max_values=self.options.max_values, progress=progress,
                                threads=threads)

    def distributed_plan(self) -> Plan:
        """What `options.ranks` ranks run (torch; a Python model's code runs here): each
        rank's own spec and the wrapping."""
        from gradexplain.distributed.plan import python_plan, spec_plan

        options = self.options
        assert options.ranks is not None
        threads = DEFAULT_THREADS if options.threads is None else options.threads
        wrap = None if options.wrap is None else _wrap_kind(options.wrap)
        if self.spec is None:
            return python_plan(self.target, options.inputs, options.inputs_file,
                               options.loss or "sum", options.output, options.ranks, wrap,
                               options.max_values, threads)
        return spec_plan(self.spec, self.target, self.text, options.ranks, wrap,
                         options.max_values, threads)

    def capture_distributed(self) -> DistributedWalk:
        """Run it on `options.ranks` ranks, wrapped: every rank's walk, read as a distributed
        one."""
        from gradexplain.distributed.run import capture_distributed

        return capture_distributed(self.distributed_plan())


def _wrap_kind(text: str) -> WrapKind:
    if text == "ddp":
        return "ddp"
    if text == "fsdp":
        return "fsdp"
    raise UsageError(f"--wrap {text!r}: use ddp or fsdp")


def open_source(spec: str | None, load: Path | None,
                options: RunOptions = NO_OPTIONS) -> Session | Source:
    """A saved session (`load`, no torch), or the spec or Python model to run: exactly one."""
    if (spec is None) == (load is None):
        raise UsageError("give a SPEC to run, or --load FILE to render a saved session"
                         + (" (not both)" if spec is not None else ""))
    python_only = [flag for flag, given in (("--input", options.inputs),
                                            ("--inputs", options.inputs_file),
                                            ("--loss", options.loss),
                                            ("--loss-of", options.output)) if given]
    if options.wrap is not None and options.ranks is None:
        raise UsageError(f"--wrap {options.wrap} wraps the model for a distributed run: give "
                         "--ranks N too")
    if load is not None:
        run_only = python_only + [flag for flag, given in (
            ("--max-values", options.max_values), ("--threads", options.threads),
            ("--ranks", options.ranks)) if given is not None]
        if run_only:
            raise UsageError("--load renders a saved session as it was captured: leave out "
                             f"{', '.join(run_only)}")
        from gradexplain.records.session import load_session

        return load_session(load)
    assert spec is not None
    if is_python(spec):
        if options.output is not None:
            from gradexplain.output_path import parse_output_path

            parse_output_path(options.output)  # a malformed path, before any code runs
        if not options.inputs:  # with --input too, the run says to give only one
            check_inputs_file(options.inputs_file)
        return Source(spec, options)
    if python_only:
        raise UsageError(f"{', '.join(python_only)}: only for a Python model (FILE.py:NAME); "
                         "a YAML spec declares its own inputs and backward")
    return spec_source(Path(spec), options)


def spec_source(path: Path, options: RunOptions = NO_OPTIONS) -> Source:
    """A YAML spec file read and checked, ready to capture. The path is only ever read as a
    spec: `report --all` passes its folder's entries here, so that no name in the folder
    (`evil.py:make.yaml`) can be taken for Python to import."""
    from gradexplain.language import load_spec_text, read_spec_text

    # One read: the session keeps exactly the text that was run.
    text = read_spec_text(path)
    return Source(str(path), options, load_spec_text(text, str(path)), text)


def check_inputs_file(path: Path | None) -> None:
    """`--inputs FILE` is a regular file within MAX_INPUTS_BYTES, said before any user code
    runs (`capture.pymodel.load_inputs` reads it within the same bound)."""
    if path is None:
        return
    from gradexplain.files import MAX_INPUTS_BYTES, UnreadableFile, regular_size

    try:
        regular_size(path, MAX_INPUTS_BYTES)
    except UnreadableFile as problem:
        reason = "no such file" if problem.kind == "missing" else problem.reason
        raise UsageError(f"--inputs {path}: {reason}") from None


def check_run_output(output: Path | None, flag: str, spec: str | None, load: Path | None,
                     options: RunOptions, instead: str = "give a file name to write"
                     ) -> Path | None:
    """Before the run: its output file (`-o`, `--save`; None: stdout) can be written and is
    none of the run's inputs (`run_inputs`); `instead`: what to do about a pipe or device.
    The path to write it to, fixed to the working directory now (`files.fixed_path`: a
    Python model may change it as it runs)."""
    if output is None:
        return None
    from gradexplain.files import check_output, fixed_path

    check_output(output, flag, run_inputs(spec, load, options), instead)
    return fixed_path(output)


def run_inputs(spec: str | None, load: Path | None, options: RunOptions) -> tuple[Path, ...]:
    """The files a run reads, which its outputs must never overwrite: the spec (or the .py
    file of a Python model, or the files of its module `pkg.mod`), the saved session, the
    --inputs file."""
    from gradexplain.target import TARGET, is_python_target, module_files

    files = [path for path in (load, options.inputs_file) if path is not None]
    if spec is not None:
        files.append(Path(spec))
        match = TARGET.match(spec)
        if match is not None and is_python_target(spec):
            where = match.group("where")
            files.extend((Path(where),) if where.endswith(".py") else module_files(where))
    return tuple(files)


def is_python(spec: str) -> bool:
    """FILE.py:NAME or package.module:NAME; a bare FILE.py is a mistake worth naming."""
    from gradexplain.target import is_python_target, names_python_model

    where, colon, name = spec.rpartition(":")
    if spec.endswith(".py") or (colon and where.endswith(".py") and not is_python_target(spec)
                                and not Path(spec).is_file()):
        file = spec if spec.endswith(".py") else where
        what = (f"{spec} is Python" if file == spec else
                f"{spec} names no model after the colon" if not name else
                f"{spec}: {name!r} is not a Python name")
        raise UsageError(f"{what}: name the model in it, as {file}:make_model (an "
                         "nn.Module, or a function with no arguments that returns one)")
    return names_python_model(spec)


def check_module(session: Session, module: str | None) -> None:
    """`--module PATH` names a module the session has (None: no filter)."""
    if module is None:
        return
    known = {call.module for trace in session.traces for call in trace.calls}
    if module not in known:
        raise UsageError(f"--module {module!r}: no such module in {session.walk.spec} "
                         f"(use a path such as {', '.join(sorted(known - {''})[:3])})")


__all__ = ["NO_OPTIONS", "RunOptions", "Source", "check_inputs_file", "check_module",
           "check_run_output", "is_python", "open_source", "run_inputs", "spec_source"]
