"""The command line: one call per pipeline stage, the only place that prints, errors to exit codes.

Imports stay light at module level: `gradexplain --help` and `gradexplain validate` must never
import torch, so anything that needs torch is imported inside the command that runs it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gradexplain import __version__
from gradexplain.errors import GradexplainError, UsageError
from gradexplain.threads import DEFAULT_THREADS, MAX_THREADS

# torch (its torch.func part) warns on import when numpy is missing; gradexplain never uses
# numpy, and the warning would land in the middle of walk's output on a fresh machine.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

if TYPE_CHECKING:
    from rich.console import RenderableType

    from gradexplain.analysis.order import FiringOrder
    from gradexplain.records.session import Session
    from gradexplain.records.trace import HookKind, Mode

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
    traceback: Annotated[
        bool, typer.Option("--traceback", help="On an error, show the Python traceback too.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
) -> None:
    _state["traceback"] = traceback


@app.command()
def validate(
    specs: Annotated[
        list[Path],
        typer.Argument(help="One or more spec files (YAML).", show_default=False),
    ],
) -> None:
    """Check spec files without running them (torch is not imported).

    Prints one summary line per good spec; for a bad one, the file, line:column, key path and what
    was expected. Exit 0 when all are good, 2 when any is not.
    """
    code = _validate_files(specs)
    if code:
        raise typer.Exit(code)


def _validate_files(paths: list[Path]) -> int:
    """Print a summary line per good spec and an error line per bad one; the exit code."""
    from gradexplain.language import load_spec
    from gradexplain.render.summary import validate_line

    failed = False
    for path in paths:
        try:
            spec = load_spec(path)
        except GradexplainError as error:
            if _state["traceback"]:
                raise
            typer.echo(f"error: {error.one_line()}", err=True)
            failed = True
            continue
        typer.echo(validate_line(spec))
    return 2 if failed else 0


def _plain_validate(argv: list[str]) -> list[Path] | None:
    """The files of `validate FILE...` when that is the whole command line, else None.

    typer coerces every argument it parses through pydantic, whose import alone costs about
    as much as the whole start-up budget (1.5x `import typer, rich, yaml`). The common form of
    the command that must start fastest is read here directly; anything else (an option, --help,
    no file) goes through typer, which also owns every usage message.
    """
    if len(argv) < 2 or argv[0] != "validate":
        return None
    files = argv[1:]
    if any(item.startswith("-") or not item for item in files):
        return None
    return [Path(item) for item in files]


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


class PassChoice(str, Enum):
    legacy = "legacy"
    full = "full"
    both = "both"


class HookChoice(str, Enum):
    forward_pre = "forward_pre"
    forward = "forward"
    backward = "backward"
    full_backward_pre = "full_backward_pre"
    full_backward = "full_backward"
    tensor = "tensor"
    post_accumulate_grad = "post_accumulate_grad"
    node_pre = "node_pre"
    node = "node"


SpecArgument = Annotated[
    str | None,
    typer.Argument(help="The spec file (YAML), or a Python model: FILE.py:NAME or "
                   "package.module:NAME, an nn.Module or a zero-argument function returning "
                   "one (this runs that Python code). Leave it out when using --load.",
                   show_default=False, metavar="SPEC"),
]
InputOption = Annotated[
    list[str] | None,
    typer.Option("--input", help="Python models: the shape of one forward argument, such as "
                 "4x3 (4x3:float64, 2x5:int64 for token ids 0-9); repeat it for each argument. "
                 "Filled with seeded randn; floating inputs require grad.", show_default=False),
]
InputsOption = Annotated[
    Path | None,
    typer.Option("--inputs", help="Python models: a torch.save'd tensor, or list of tensors, "
                 "to use as the forward's arguments instead of --input.", show_default=False),
]


class LossChoice(str, Enum):
    sum = "sum"
    mean = "mean"


LossOption = Annotated[
    LossChoice | None,
    typer.Option("--loss", help="Python models: the scalar backpropagated, the sum (the "
                 "default) or the mean of the model's output.", show_default=False),
]
MaxValuesOption = Annotated[
    int | None,
    typer.Option("--max-values", min=1, help="Tensors with more elements are recorded as min, "
                 "max, mean and norm when a hook sees them, and checked on those. Default "
                 "10000; 1000 for Python models, whose activations are large.",
                 show_default=False),
]
ThreadsOption = Annotated[
    int | None,
    typer.Option("--threads", min=1, max=MAX_THREADS, help=f"torch's intra-op threads for the "
                 f"run. Default {DEFAULT_THREADS}: tiny models gain nothing from more, and with "
                 "one the output is the same whatever OMP_NUM_THREADS says.",
                 show_default=False),
]


@dataclass(frozen=True)
class ModelOptions:
    """How to run the spec or the Python model given on the command line (the inputs and the
    loss are for a Python model only; a YAML spec declares its own)."""

    inputs: tuple[str, ...] = ()
    inputs_file: Path | None = None
    loss: str | None = None
    max_values: int | None = None
    threads: int | None = None


NO_OPTIONS = ModelOptions()
LoadOption = Annotated[
    Path | None,
    typer.Option("--load", help="Render a session saved by `walk --save` instead of running "
                 "a spec (torch is not run again).", show_default=False),
]
FormatOption = Annotated[
    Format, typer.Option("--format", "-f", help="text for people, json for programs, markdown "
                         "for a GitHub page.")
]
ModuleOption = Annotated[
    str | None,
    typer.Option("--module", help="Only this module (a path such as module2 or module2.l; "
                 "submodules included).", show_default=False),
]


@app.command()
def walk(
    spec: SpecArgument = None,
    output_format: FormatOption = Format.text,
    pass_: Annotated[
        PassChoice, typer.Option("--pass", help="Show the legacy pass, the full pass, or both.")
    ] = PassChoice.both,
    module: ModuleOption = None,
    hook: Annotated[
        list[HookChoice] | None,
        typer.Option("--hook", help="Only this kind of hook (repeat for several).",
                     show_default=False),
    ] = None,
    save: Annotated[
        Path | None,
        typer.Option("--save", help="Also save the whole session (both traces, every label "
                     "and check) as JSON, for `report --load` and `diff --load`.",
                     show_default=False),
    ] = None,
    load: LoadOption = None,
    order: Annotated[
        bool,
        typer.Option("--order", help="Also show the firing order of each shown pass's first "
                     "call: every hook call numbered, with the rule that puts it there."),
    ] = False,
    all_blocks: Annotated[
        bool,
        typer.Option("--all-blocks", help="Text output: print every repeated block in full "
                     "instead of folding identical ones after the first."),
    ] = False,
    input_shapes: InputOption = None,
    inputs_file: InputsOption = None,
    loss: LossOption = None,
    max_values: MaxValuesOption = None,
    threads: ThreadsOption = None,
) -> None:
    """Run SPEC with every hook and say which derivative each hook argument is.

    Two passes on identical builds (legacy register_backward_hook, then full backward hooks),
    each with forward, tensor, post-accumulate-grad and autograd Node hooks. Every gradient
    argument is labelled from the autograd graph and checked against a hook-free run; the
    chain rule is derived node by node. JSON output is schema gradexplain.walk/1. Exit 0 when
    every check holds, 1 when one fails, 2 for a bad spec or option.

    SPEC may also be your own model: `gradexplain walk models.py:make_model --input 4x3`
    (see --input, --inputs, --loss); the loss backpropagated is the sum of its output.
    """
    from gradexplain.render.select import select

    session = _session(spec, load, _model_options(input_shapes, inputs_file, loss, max_values,
                                                  threads))
    if save is not None:
        from gradexplain.records.session import save_session

        save_session(session, save)
    _check_module(session, module)
    modes: tuple[Mode, ...] = ("legacy", "full") if pass_ is PassChoice.both else (
        ("legacy",) if pass_ is PassChoice.legacy else ("full",))
    kinds: list[HookKind] = [item.value for item in hook or []]
    shown = select(session.walk, modes, module, kinds)
    orders = _orders(session, modes) if order else []
    if output_format is Format.json:
        from gradexplain.records.codec import to_data
        from gradexplain.render.json_walk import walk_json

        document = walk_json(shown)
        if order:
            document["firing_order"] = [to_data(item) for item in orders]
        _echo_json(document)
    elif output_format is Format.markdown:
        from gradexplain.render.markdown import blocks
        from gradexplain.render.markdown_walk import walk_markdown
        from gradexplain.render.order import order_markdown

        typer.echo(blocks(walk_markdown(shown), *(order_markdown(item, 2) for item in orders)),
                   nl=False)
    else:
        from rich.console import Group

        from gradexplain.render.order import order_text
        from gradexplain.render.text_walk import walk_text

        _echo_rich(Group(walk_text(shown, collapse=not all_blocks),
                         *(order_text(item) for item in orders)))
    _exit_on_failures(session)
    if any(item.out_of_order for item in orders):
        raise typer.Exit(1)


@app.command()
def diff(
    spec: SpecArgument = None,
    output_format: FormatOption = Format.text,
    module: ModuleOption = None,
    load: LoadOption = None,
    input_shapes: InputOption = None,
    inputs_file: InputsOption = None,
    loss: LossOption = None,
    max_values: MaxValuesOption = None,
    threads: ThreadsOption = None,
) -> None:
    """Legacy vs full backward hooks, module by module, argument by argument.

    For every module, its register_backward_hook call beside its register_full_backward_hook
    call: what each argument holds (derivative, shape, value, check), why they differ (the
    node the legacy hook sits on, inputs it cannot see, extra entries, operand order, hooks
    that never fire, zeros and None), and a verdict in plain words. JSON output is schema
    gradexplain.diff/1. Exit 0, or 1 when a label failed its check, 2 for bad input.
    """
    from gradexplain.analysis.diff import compare
    from gradexplain.render.select import select_diff

    session = _session(spec, load, _model_options(input_shapes, inputs_file, loss, max_values,
                                                  threads))
    _check_module(session, module)
    result = select_diff(compare(session), module)
    if output_format is Format.json:
        from gradexplain.render.json_diff import diff_json

        _echo_json(diff_json(result))
    elif output_format is Format.markdown:
        from gradexplain.render.markdown_diff import diff_markdown

        typer.echo(diff_markdown(result), nl=False)
    else:
        from gradexplain.render.text_diff import diff_text

        _echo_rich(diff_text(result))
    _exit_on_failures(session)


@app.command()
def report(
    spec: SpecArgument = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The markdown file to write (with --all: the "
                     "folder). Without it the report goes to stdout.", show_default=False),
    ] = None,
    load: LoadOption = None,
    all_specs: Annotated[
        Path | None,
        typer.Option("--all", help="Every *.yaml spec in this folder: one report each, plus "
                     "an index.md linking them, written to the -o folder.",
                     show_default=False),
    ] = None,
    input_shapes: InputOption = None,
    inputs_file: InputsOption = None,
    loss: LossOption = None,
    max_values: MaxValuesOption = None,
    threads: ThreadsOption = None,
) -> None:
    """Write a self-contained markdown report of SPEC, readable on GitHub.

    The model, a mermaid diagram of the forward graph and one of the autograd graph with the
    node each legacy hook sits on marked, the forward values, the chain rule in LaTeX, both
    passes' hook timelines, the legacy-vs-full diff, the checks, torch's version and warnings.
    The same spec always gives the same bytes. Exit 0, 1 when a label failed its check, 2 for
    bad input.
    """
    from gradexplain.analysis.diff import compare
    from gradexplain.analysis.order import first_firing_orders
    from gradexplain.render.report import report_markdown

    if all_specs is not None:
        if spec is not None or load is not None:
            raise UsageError("--all takes a folder of specs: leave out SPEC and --load")
        if output is None:
            raise UsageError("--all needs -o FOLDER for the reports and their index.md")
        _report_all(all_specs, output)
        return
    session = _session(spec, load, _model_options(input_shapes, inputs_file, loss, max_values,
                                                  threads))
    text = report_markdown(session, compare(session), first_firing_orders(session.traces))
    if output is None:
        typer.echo(text, nl=False)
    else:
        _write(output, text)
        typer.echo(f"wrote {output}", err=True)
    _exit_on_failures(session)


def _report_all(folder: Path, output: Path) -> None:
    """One report per spec in `folder`, and an index; a bad spec is reported and skipped."""
    from gradexplain.analysis.diff import compare
    from gradexplain.analysis.order import first_firing_orders
    from gradexplain.render.report import ReportEntry, index_markdown, report_markdown

    if not folder.is_dir():
        raise UsageError(f"--all {folder}: not a folder")
    specs = sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))
    if not specs:
        raise UsageError(f"--all {folder}: no *.yaml specs in it")
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"-o {output}: cannot make the folder ({error.strerror})") from error
    entries: list[ReportEntry] = []
    bad = failed = False
    for path in specs:
        try:
            session = _session(str(path), None)
        except GradexplainError as error:
            if _state["traceback"]:
                raise
            typer.echo(f"error: {error.one_line()}", err=True)
            bad = True
            continue
        name = f"{path.stem}.md"
        _write(output / name, report_markdown(session, compare(session),
                                              first_firing_orders(session.traces)))
        entries.append(ReportEntry(name, session.walk))
        failed |= bool(session.walk.failures())
    _write(output / "index.md", index_markdown(entries))
    typer.echo(f"wrote {len(entries)} report(s) and {output / 'index.md'}", err=True)
    if bad:
        raise typer.Exit(2)
    if failed:
        raise typer.Exit(1)


def _model_options(shapes: list[str] | None, inputs_file: Path | None, loss: LossChoice | None,
                   max_values: int | None, threads: int | None) -> ModelOptions:
    return ModelOptions(tuple(shapes or ()), inputs_file, None if loss is None else loss.value,
                        max_values, threads)


def _session(spec: str | None, load: Path | None,
             options: ModelOptions = NO_OPTIONS) -> Session:
    """Run the spec or the Python model (torch), or load a saved session (no torch): exactly
    one of the two."""
    if (spec is None) == (load is None):
        raise UsageError("give a SPEC to run, or --load FILE to render a saved session "
                         "(not both)")
    python_only = [flag for flag, given in (("--input", options.inputs),
                                            ("--inputs", options.inputs_file),
                                            ("--loss", options.loss)) if given]
    if load is not None:
        run_only = python_only + [flag for flag, given in (
            ("--max-values", options.max_values), ("--threads", options.threads))
            if given is not None]
        if run_only:
            raise UsageError("--load renders a saved session as it was captured: leave out "
                             f"{', '.join(run_only)}")
        from gradexplain.records.session import load_session

        return load_session(load)
    assert spec is not None
    threads = DEFAULT_THREADS if options.threads is None else options.threads
    if _is_python(spec):
        from gradexplain.api import run_target

        with _progress_bar() as progress:
            return run_target(spec, options.inputs, options.inputs_file, options.loss or "sum",
                              options.max_values, progress, threads)
    if python_only:
        raise UsageError(f"{', '.join(python_only)}: only for a Python model (FILE.py:NAME); "
                         "a YAML spec declares its own inputs and backward")
    from gradexplain.language import load_spec_text, read_spec_text

    # One read: the session keeps exactly the text that was run.
    text = read_spec_text(Path(spec))
    checked = load_spec_text(text, spec)
    # Only a good spec pays for importing torch: a bad one is reported in a fraction of the time.
    from gradexplain.capture.pipeline import capture

    with _progress_bar() as progress:
        return capture(checked, spec, text, max_values=options.max_values, progress=progress,
                       threads=threads)


@contextmanager
def _progress_bar() -> Iterator[Callable[[str], None] | None]:
    """A transient progress bar of the walk's stages on stderr, only when stderr is a terminal
    (piped or captured stderr stays clean)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gradexplain.capture.pipeline import STAGES

    columns = (TextColumn("{task.description:<16}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("loading", total=len(STAGES))

        def step(stage: str) -> None:
            bar.update(task, completed=STAGES.index(stage), description=stage)

        yield step


def _is_python(spec: str) -> bool:
    """FILE.py:NAME or package.module:NAME; a bare FILE.py is a mistake worth naming."""
    from gradexplain.target import is_python_target

    if spec.endswith(".py"):
        raise UsageError(f"{spec} is Python: name the model in it, as {spec}:make_model (an "
                         "nn.Module, or a function with no arguments that returns one)")
    return is_python_target(spec) and not Path(spec).is_file()


def _check_module(session: Session, module: str | None) -> None:
    if module is None:
        return
    known = {call.module for trace in session.traces for call in trace.calls}
    if module not in known:
        raise UsageError(f"--module {module!r}: no such module in {session.walk.spec} "
                         f"(use a path such as {', '.join(sorted(known - {''})[:3])})")


def _orders(session: Session, modes: tuple[Mode, ...]) -> list[FiringOrder]:
    """The firing order of each pass in `modes`: its first call that made any hook call."""
    from gradexplain.analysis.order import first_firing_order

    traces = [session.trace(mode) for mode in modes]
    return [order for order in (first_firing_order(trace) for trace in traces if trace)
            if order is not None]


def _exit_on_failures(session: Session) -> None:
    if session.walk.failures():
        raise typer.Exit(1)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from error


def _echo_json(data: object) -> None:
    import json

    typer.echo(json.dumps(data, ensure_ascii=False, indent=1))


def _echo_rich(renderable: RenderableType) -> None:
    from rich.console import Console

    if sys.stdout.isatty():
        Console().print(renderable)
        return
    from gradexplain.render.console import plain_text

    # Piped or redirected: 100 columns, no colour, no trailing padding on any line.
    typer.echo(plain_text(renderable))


# What the shell sets when it asks for completions (typer's name: `_{PROG}_COMPLETE`).
COMPLETION_VARIABLE = "_GRADEXPLAIN_COMPLETE"


@contextmanager
def _completion_without_coercion() -> Iterator[None]:
    """While answering a shell's completion request, leave parameter values unconverted.

    typer (0.2x) converts every value it parses through a pydantic adapter, and completion parses
    the command line typed so far; importing pydantic would double the time a <TAB> takes. The
    completions need only the words typed, not converted values (no completer here reads them),
    so under click's resilient parsing, which completion uses, values pass through as they are.
    Older typers have no such parameter class and need nothing.
    """
    parameter = getattr(getattr(typer, "core", None), "_TyperParameter", None)
    if COMPLETION_VARIABLE not in os.environ or parameter is None:
        yield
        return
    convert = parameter.process_value

    def process_value(self: object, ctx: typer.Context, value: object) -> object:
        if ctx.resilient_parsing:
            return value
        return convert(self, ctx, value)

    parameter.process_value = process_value
    try:
        yield
    finally:
        parameter.process_value = convert


def main() -> None:
    """Entry point of the `gradexplain` console script and `python -m gradexplain`."""
    try:
        plain_validate = _plain_validate(sys.argv[1:])
        if plain_validate is not None:
            sys.exit(_validate_files(plain_validate))
        with _completion_without_coercion():
            app()
    except GradexplainError as error:
        if _state["traceback"]:
            raise
        typer.echo(f"error: {error.one_line()}", err=True)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as error:
        # A bug of ours, not bad input: still one line, with the way to see more.
        if _state["traceback"]:
            raise
        typer.echo(
            f"internal error: {type(error).__name__}: {error} "
            "(rerun with --traceback and please report it)",
            err=True,
        )
        sys.exit(1)
