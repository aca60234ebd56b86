"""The command line: one call per pipeline stage, errors to exit codes; with cli_output (how text
leaves the program), the only place that prints.

Imports stay light at module level: `gradexplain --help` and `gradexplain validate` must never
import torch, so anything that needs torch is imported inside the command that runs it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from gradexplain import __version__
from gradexplain import cli_options as option
from gradexplain.cli_output import (
    echo,
    failed_on_stdout,
    show,
    show_warning,
    stdout_failure,
    write,
)
from gradexplain.cli_startup import (
    completion_without_coercion,
    conversion_without_pydantic,
    plain_validate_files,
)
from gradexplain.collector import freeze_survivors, pause_collection, resume_collection
from gradexplain.errors import GradexplainError, UsageError, first_line
from gradexplain.sessions import (
    NO_OPTIONS,
    RunOptions,
    Source,
    check_module,
    check_run_output,
    open_source,
)
from gradexplain.user_output import own_output

# torch (its torch.func part) warns on import when numpy is missing; gradexplain never uses
# numpy, and the warning would land in the middle of walk's output on a fresh machine.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

if TYPE_CHECKING:

    from gradexplain.records.distributed import DistributedWalk
    from gradexplain.records.distributed_diff import DistributedDiff
    from gradexplain.records.session import Session
    from gradexplain.records.trace import HookKind
    from gradexplain.render.outputs import OutputFormat

app = typer.Typer(
    name="gradexplain",
    help=(
        "Which derivative is this hook argument? gradexplain runs a tiny PyTorch model from a "
        "YAML spec, or your own (FILE.py:NAME), with every kind of hook and labels each "
        "gradient it sees.\n\n"
        "Exit codes: 0 success, 1 the run found a problem, 2 bad input."
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_state = {"traceback": False}


def _version(ctx: typer.Context, value: bool) -> None:
    # Eager callbacks can run while the shell asks for completions too (click's resilient
    # parsing; typer 0.15 lets them): printing the version there would offer it as one.
    if value and not ctx.resilient_parsing:
        typer.echo(f"gradexplain {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    traceback: option.TracebackOption = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
) -> None:
    _state["traceback"] = traceback


@app.command()
def validate(
    specs: option.SpecFilesArgument,
) -> None:
    """Check spec files without running them (torch is not imported).

    Prints one summary line per good spec; for a bad one, the file, line:column, key path and what
    was expected. Exit 0 when all are good, 2 when any is not.
    """
    code = _validate_files(specs)
    if code:
        raise typer.Exit(code)


def _not_python(path: Path) -> None:
    """`validate` reads YAML: a Python model (FILE.py:NAME) is said to be one, not missing."""
    from gradexplain.target import names_python_model

    if names_python_model(str(path)):
        raise UsageError(f"{path}: validate reads YAML specs without running anything, and a "
                         f"Python model is checked by running it: gradexplain walk {path} "
                         "--input SHAPE")


def _validate_files(paths: list[Path]) -> int:
    """Print a summary line per good spec and an error line per bad one; the exit code."""
    from gradexplain.language import load_spec
    from gradexplain.render.summary import validate_line

    failed = False
    for path in paths:
        try:
            _not_python(path)
            spec = load_spec(path)
        except GradexplainError as error:
            _say(error)
            failed = True
            continue
        echo(validate_line(spec))
    return 2 if failed else 0


@app.command()
def walk(
    spec: option.SpecArgument = None,
    output_format: option.FormatOption = option.Format.text,
    pass_: option.PassOption = option.PassChoice.both,
    module: option.ModuleOption = None,
    hook: option.HookOption = None,
    save: option.SaveOption = None,
    load: option.LoadOption = None,
    order: option.OrderOption = False,
    all_blocks: option.AllBlocksOption = False,
    timeline: option.TimelineOption = False,
    pretty: option.PrettyOption = False,
    input_shapes: option.InputOption = None,
    inputs_file: option.InputsOption = None,
    loss: option.LossOption = None,
    loss_of: option.LossOfOption = None,
    max_values: option.MaxValuesOption = None,
    threads: option.ThreadsOption = None,
    ranks: option.RanksOption = None,
    wrap: option.WrapOption = None,
) -> None:
    """Run SPEC with every hook and say which derivative each hook argument is.

    Two passes on identical builds (legacy register_backward_hook, then full backward hooks),
    each with forward, tensor, post-accumulate-grad and autograd Node hooks. Every gradient
    argument is labelled from the autograd graph and checked against a hook-free run; the
    chain rule is derived node by node. Text opens with what each module's legacy and full
    hooks get, then the chain rule with every hook argument at its step (--timeline adds each
    pass's hook calls in firing order). JSON output is schema gradexplain.walk/1. Exit 0 when
    every check holds, 1 when one fails, 2 for a bad spec or option.

    SPEC may also be your own model: `gradexplain walk models.py:make_model --input 4x3`
    (see --input, --inputs, --loss, --loss-of); the loss backpropagated is the sum of its
    output, or of the part --loss-of selects (--loss-of 0 for nn.LSTM's out).

    With --ranks N the model runs in N processes under DistributedDataParallel or FSDP2
    (--wrap), and every hook on a parameter is said to see this rank's own gradient, or the
    sum or mean over ranks, relative to the all-reduce, each checked against single-process
    runs of every rank's inputs: `gradexplain walk specs/ddp_hooks.yaml --ranks 2`.
    """
    from gradexplain.analysis.order import first_firing_orders
    from gradexplain.analysis.pinned import session_view
    from gradexplain.render.outputs import walk_output
    from gradexplain.render.select import select

    options = option.run_options(input_shapes, inputs_file, loss, max_values, threads, loss_of,
                                 ranks, wrap)
    if ranks is not None:
        _refuse_with_ranks(("--save", save is not None), ("--order", order),
                           ("--module", module is not None), ("--hook", bool(hook)),
                           ("--pass", pass_ is not option.PassChoice.both),
                           ("--all-blocks", all_blocks), ("--threads", _threaded(threads)))
        _walk_distributed(spec, load, options, output_format.value, timeline, pretty)
        return
    save_to = check_run_output(save, "--save", spec, load, options)
    session = _session(spec, load, options)
    if save_to is not None:
        from gradexplain.records.session import save_session

        save_session(session, save_to)
    check_module(session, module)
    modes = pass_.modes
    kinds: list[HookKind] = [item.value for item in hook or []]
    shown = select(session.walk, modes, module, kinds)
    # JSON has every label and pin already; only text and markdown show the view.
    view = (None if output_format.value == "json"
            else session_view(session, shown, module, kinds))
    orders = first_firing_orders(session.passes(modes)) if order else None
    show(walk_output(shown, view, orders, output_format.value, collapse=not all_blocks,
                     timeline=timeline, pretty=pretty))
    _exit_on_failures(session)
    if any(item.out_of_order for item in orders or ()):
        raise typer.Exit(1)


@app.command()
def diff(
    spec: option.SpecArgument = None,
    output_format: option.FormatOption = option.Format.text,
    module: option.ModuleOption = None,
    load: option.LoadOption = None,
    pretty: option.PrettyOption = False,
    input_shapes: option.InputOption = None,
    inputs_file: option.InputsOption = None,
    loss: option.LossOption = None,
    loss_of: option.LossOfOption = None,
    max_values: option.MaxValuesOption = None,
    threads: option.ThreadsOption = None,
    ranks: option.RanksOption = None,
    wrap: option.WrapOption = None,
) -> None:
    """Legacy vs full backward hooks, module by module, argument by argument.

    For every module, its register_backward_hook call beside its register_full_backward_hook
    call: what each argument holds (derivative, shape, value, check), why they differ (the
    node the legacy hook sits on, inputs it cannot see, extra entries, operand order, hooks
    that never fire, zeros and None), and a verdict in plain words; then the chain rule with
    each module hook's argument at its step. JSON output is schema gradexplain.diff/1. Exit
    0, or 1 when a label failed its check, 2 for bad input.

    With --ranks N: each rank's single-process walk against its walk under DDP or FSDP2
    (--wrap), hook by hook: what the wrapping changed, and why (schema
    gradexplain.diff-distributed/1).
    """
    from gradexplain.analysis.diff import compare
    from gradexplain.analysis.pinned import BACKWARD_HOOKS, pinned_view
    from gradexplain.render.outputs import diff_output
    from gradexplain.render.select import select, select_diff

    options = option.run_options(input_shapes, inputs_file, loss, max_values, threads, loss_of,
                                 ranks, wrap)
    if ranks is not None:
        from gradexplain.render.distributed_outputs import distributed_diff_output

        _refuse_with_ranks(("--module", module is not None), ("--threads", _threaded(threads)))
        ranks_walk, ranks_result = _ranks_diff(spec, load, options)
        show(distributed_diff_output(ranks_result, output_format.value, pretty))
        if ranks_walk.failures():
            raise typer.Exit(1)
        return
    session = _session(spec, load, options)
    check_module(session, module)
    result = select_diff(compare(session), module)
    shown = select(session.walk, ("legacy", "full"), module, BACKWARD_HOOKS)
    view = pinned_view(shown, None, filtered=True)
    show(diff_output(result, shown, view, output_format.value, pretty))
    _exit_on_failures(session)


@app.command()
def report(
    spec: option.SpecArgument = None,
    output: option.OutputOption = None,
    load: option.LoadOption = None,
    all_specs: option.AllSpecsOption = None,
    input_shapes: option.InputOption = None,
    inputs_file: option.InputsOption = None,
    loss: option.LossOption = None,
    loss_of: option.LossOfOption = None,
    max_values: option.MaxValuesOption = None,
    threads: option.ThreadsOption = None,
    ranks: option.RanksOption = None,
    wrap: option.WrapOption = None,
) -> None:
    """Write a self-contained markdown report of SPEC, readable on GitHub.

    The model, a mermaid diagram of the forward graph and one of the autograd graph with the
    node each legacy hook sits on marked, the forward values, the chain rule in LaTeX, both
    passes' hook timelines, the legacy-vs-full diff, the checks, torch's version and warnings.
    The same spec always gives the same bytes. Exit 0, 1 when a label failed its check, 2 for
    bad input. With --ranks N, a section on what DDP or FSDP2 (--wrap) changes, hook by hook.
    """
    from gradexplain.pages import report_page

    if all_specs is not None:
        if spec is not None or load is not None:
            raise UsageError("--all takes a folder of specs: leave out SPEC and --load")
        if output is None:
            raise UsageError("--all needs -o FOLDER for the reports and their index.md")
        if ranks is not None or wrap is not None:
            raise UsageError("--all reports each spec in one process: leave out --ranks and "
                             "--wrap")
        _report_all(all_specs, output)
        return
    options = option.run_options(input_shapes, inputs_file, loss, max_values, threads, loss_of,
                                 ranks, wrap)
    write_to = check_run_output(output, "-o", spec, load, options,
                                "give a file name, or leave out -o to print the report to "
                                "stdout")
    distributed = None
    failed = False
    if ranks is not None:
        _refuse_with_ranks(("--threads", _threaded(threads)))
        ranks_walk, distributed = _ranks_diff(spec, load, options)
        failed = bool(ranks_walk.failures())
    session = _session(spec, load, replace(options, ranks=None, wrap=None))
    text = report_page(session, distributed)
    if write_to is None:
        echo(text, nl=False)
    else:
        write(write_to, text)
        echo(f"wrote {output}", err=True, one_line=True)
    if failed:
        raise typer.Exit(1)
    _exit_on_failures(session)


def _report_all(folder: Path, output: Path) -> None:
    """One report per spec in `folder`, and an index; a bad spec is reported and skipped.
    Every entry is read as a spec file (never as a Python target), and only if regular."""
    from gradexplain.files import check_output, check_output_folder
    from gradexplain.pages import INDEX, report_names, report_page, spec_files
    from gradexplain.render.report import ReportEntry, index_markdown
    from gradexplain.sessions import spec_source

    names = report_names(spec_files(folder))
    check_output_folder(output, "-o")
    for name in (*names.values(), INDEX):  # a report may be a link to a spec: never written
        check_output(output / name, "-o", names)
    entries: list[ReportEntry] = []
    bad = failed = False
    for path, name in names.items():
        try:
            session = _capture(spec_source(path))
            # A report that cannot be written (a full disk) is one more bad spec, not the end
            # of the batch: the rest are still reported, and the index lists those written.
            write(output / name, report_page(session))
        except GradexplainError as error:
            _say(error)
            bad = True
            continue
        entries.append(ReportEntry(name, session.walk))
        failed |= bool(session.walk.failures())
    write(output / INDEX, index_markdown(entries))
    echo(f"wrote {len(entries)} report(s) and {output / INDEX}", err=True, one_line=True)
    if bad:
        raise typer.Exit(2)
    if failed:
        raise typer.Exit(1)


def _session(spec: str | None, load: Path | None, options: RunOptions = NO_OPTIONS) -> Session:
    """The saved session, or the spec or Python model run (with a progress bar while it runs)."""
    source = open_source(spec, load, options)
    if not isinstance(source, Source):
        return source
    session = _capture(source)
    freeze_survivors()
    return session


def _capture(source: Source) -> Session:
    """Run a spec or Python model, with a progress bar while it runs."""
    with _running(source) as progress:
        return source.capture(progress)


@contextmanager
def _running(source: Source, bar: bool = True) -> Iterator[Callable[[str], None] | None]:
    """Around a run: torch imported first, the collector back on, a progress bar (`bar`), and
    a Python model's own output kept off stdout."""
    # torch and the capture imported before the run, the end of start-up: the garbage
    # collector, paused for start-up, is back on for the run.
    from gradexplain.capture import pipeline  # noqa: F401

    resume_collection()
    if source.spec is not None:
        with _progress_bar(bar) as progress:
            yield progress
        return
    from gradexplain.user_output import ModelOutput, captured_output
    from gradexplain.user_signals import user_signals

    # A Python model's own output would corrupt stdout (JSON, a report) and its stderr writes
    # could drive the terminal: both shown on stderr, escaped, once its code is done. (Inside
    # the progress bar, which would otherwise take them to its console.) A timer it starts
    # must not end the process either (user_signals).
    printed = ModelOutput()
    try:
        with _progress_bar(bar) as progress, user_signals(), captured_output() as printed:
            yield progress
    finally:
        for line in printed.lines():
            echo(line, err=True)


@contextmanager
def _progress_bar(wanted: bool = True) -> Iterator[Callable[[str], None] | None]:
    """A transient progress bar of the walk's stages on stderr, only when stderr is a terminal
    (piped or captured stderr stays clean) and it is `wanted`."""
    if not wanted or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gradexplain.capture.pipeline import STAGES
    from gradexplain.render.console import terminal_console

    columns = (TextColumn("{task.description:<16}"), BarColumn(), TimeElapsedColumn())
    # The console holds this stderr itself: while the user's code runs, sys.stderr is theirs.
    console = terminal_console(file=sys.stderr, stderr=True)
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("loading", total=len(STAGES))

        def step(stage: str) -> None:
            bar.update(task, completed=STAGES.index(stage), description=stage)

        yield step


def _refuse_with_ranks(*flags: tuple[str, bool]) -> None:
    """The options a distributed walk does not take (yet), said before anything runs."""
    given = [flag for flag, used in flags if used]
    if "--threads" in given:
        raise UsageError("--ranks: each rank runs torch on one thread; leave out --threads "
                         "(torch's thread pool does not survive the fork that starts the ranks)")
    if given:
        raise UsageError(f"--ranks: {', '.join(given)} {'is' if len(given) == 1 else 'are'} "
                         "for single-process runs; a distributed walk shows every rank's "
                         "parameter hooks, buckets and .grad, and --timeline every hook call")


def _threaded(threads: int | None) -> bool:
    """More than one torch thread asked for, which forked ranks cannot have: torch's thread
    pool does not survive a fork once the parent has computed with it (the ranks hang)."""
    return threads is not None and threads > 1


def _ranks_diff(spec: str | None, load: Path | None,
                options: RunOptions) -> tuple[DistributedWalk, DistributedDiff]:
    """`--ranks N` for diff and report: the distributed walk and each rank's single-process
    walk against it."""
    from gradexplain.distributed.single import ranks_diff

    source = open_source(spec, load, options)
    assert isinstance(source, Source)  # --load with --ranks is refused by open_source
    with _running(source, bar=False):
        result = ranks_diff(source.distributed_plan())
    freeze_survivors()
    return result


def _walk_distributed(spec: str | None, load: Path | None, options: RunOptions,
                      output_format: OutputFormat, timeline: bool, pretty: bool) -> None:
    """`walk --ranks N`: every rank's walk under DDP or FSDP2, shown; exit 1 on a failed
    check."""
    from gradexplain.render.outputs import distributed_walk_output

    source = open_source(spec, load, options)
    assert isinstance(source, Source)  # --load with --ranks is refused by open_source
    # No progress bar: its refresh thread could hold a lock at the moment the ranks fork.
    with _running(source, bar=False):
        walk = source.capture_distributed()
    freeze_survivors()
    show(distributed_walk_output(walk, output_format, timeline=timeline, pretty=pretty))
    if walk.failures():
        raise typer.Exit(1)


def _exit_on_failures(session: Session) -> None:
    if session.walk.failures():
        raise typer.Exit(1)


def _say(error: GradexplainError) -> None:
    """Bad input as one line on stderr; with --traceback the error goes on up instead."""
    if _state["traceback"]:
        raise error
    echo(f"error: {error.one_line()}", err=True, one_line=True)


def entry() -> NoReturn:
    """Entry point of the `gradexplain` console script and `python -m gradexplain`: `main`,
    then out at once through os._exit. Nothing runs after our output: a model's
    `atexit.register(print, ...)` would write past the end of the JSON, and tearing the
    interpreter down (torch's modules, the session) only costs time. Every file is written
    whole before `main` returns (`files.write_atomic`); only Python's stream buffers remain,
    flushed here. In-process callers (the tests) use `main`, which returns or raises
    SystemExit as usual. The garbage collector is paused for start-up (`pause_collection`),
    until a run begins or the command ends."""
    pause_collection()
    _standard_streams_opened()
    own_output()
    try:
        main()
        code = 0
    except SystemExit as done:
        code = _exit_code(done.code)
    os._exit(_flushed(code))


def _standard_streams_opened() -> None:
    """A standard stream the shell closed (`>&-`, `2>&-`) is opened on /dev/null: what would
    go there is dropped, as Python's own `print` drops it, and the exit code stands. Python
    left it None, which every write would fail on; and its descriptor is taken before any
    file the run opens can take its number, where a model's writes to descriptor 1 or 2 would
    land."""
    for descriptor in (0, 1, 2):
        try:
            os.fstat(descriptor)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != descriptor:  # the lowest free number: a lower one was closed too
                os.dup2(opened, descriptor)
                os.close(opened)
            os.set_inheritable(descriptor, True)  # as the shell's was, for a child's sake
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115  # for the process's life
    if sys.stderr is None:
        sys.stderr = open(2, "w", errors="backslashreplace", closefd=False)  # noqa: SIM115


def _exit_code(code: object) -> int:
    """What Python's own exit makes of `sys.exit(code)`: None is 0, any other non-integer is
    printed on stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    echo(str(code), err=True)
    return 1


def _flushed(code: int) -> int:
    """Flush stdout and stderr before os._exit; the exit code, 2 if stdout could not be
    written (a full disk: what Python's exit says with 120), unchanged if its reader went away
    (`| head -1`, as `cli_output` does)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    except (OSError, ValueError) as error:
        echo(f"error: cannot write the output (stdout): {error}", err=True, one_line=True)
        code = code or 2
    with suppress(OSError, ValueError):
        sys.stderr.flush()
    return code


def main() -> None:
    """The command line, in this process: returns, or raises SystemExit with the exit code
    (the console script runs it through `entry`)."""
    shown_before = warnings.showwarning
    # Warnings Python shows itself (a model's, at import or in its forward) go out escaped.
    warnings.showwarning = show_warning
    try:
        _main()
    finally:
        warnings.showwarning = shown_before


def _main() -> None:
    try:
        plain_validate = plain_validate_files(sys.argv[1:])
        if plain_validate is not None:
            sys.exit(_validate_files(plain_validate))
        with completion_without_coercion(), conversion_without_pydantic():
            app()
    except GradexplainError as error:
        _say(error)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        echo("interrupted", err=True)
        sys.exit(130)
    except OSError as error:
        # typer's --help writes to stdout itself: a full disk there is one line, as ours is.
        if not failed_on_stdout(error):
            _internal_error(error)
        failure = stdout_failure(error)
        if failure is not None:
            _say(failure)
            sys.exit(failure.exit_code)
    except Exception as error:
        _internal_error(error)


def _internal_error(error: Exception) -> NoReturn:
    """A bug of ours, not bad input: still one line, with the way to see more."""
    if _state["traceback"]:
        raise error
    # Its first line, cut: torch's messages can run to pages (a list of every backend).
    message = first_line(error)
    message = message if len(message) <= 300 else message[:300] + "..."
    echo(
        f"internal error: {type(error).__name__}: {message} "
        "(rerun with --traceback and please report it)",
        err=True, one_line=True,
    )
    sys.exit(1)
