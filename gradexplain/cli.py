"""The command line: one call per pipeline stage, the only place that prints, errors to exit codes.

Imports stay light at module level: `gradexplain --help` and `gradexplain validate` must never
import torch, so anything that needs torch is imported inside the command that runs it.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gradexplain import __version__
from gradexplain.errors import GradexplainError, UsageError

if TYPE_CHECKING:
    from gradexplain.trace_data import HookKind, Mode

app = typer.Typer(
    name="gradexplain",
    help=(
        "Which derivative is this hook argument? gradexplain runs a tiny PyTorch model from a "
        "YAML spec with every kind of hook and labels each gradient it sees.\n\n"
        "Exit codes: 0 success, 1 the run found a problem, 2 bad input."
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_state = {"traceback": False}


def _version(value: bool) -> None:
    if value:
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
    from gradexplain.render.summary import validate_line
    from gradexplain.spec import load_spec

    failed = False
    for path in specs:
        try:
            spec = load_spec(path)
        except GradexplainError as error:
            if _state["traceback"]:
                raise
            typer.echo(f"error: {error.one_line()}", err=True)
            failed = True
            continue
        typer.echo(validate_line(spec))
    if failed:
        raise typer.Exit(2)


class Format(str, Enum):
    text = "text"
    json = "json"


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


@app.command()
def walk(
    spec: Annotated[Path, typer.Argument(help="The spec file (YAML).", show_default=False)],
    output_format: Annotated[
        Format, typer.Option("--format", "-f", help="text for people, json for programs "
                             "(schema gradexplain.walk/1).")
    ] = Format.text,
    pass_: Annotated[
        PassChoice, typer.Option("--pass", help="Show the legacy pass, the full pass, or both.")
    ] = PassChoice.both,
    module: Annotated[
        str | None,
        typer.Option("--module", help="Only this module's hooks and tensors (a path such as "
                     "module2 or module2.l; submodules included)."),
    ] = None,
    hook: Annotated[
        list[HookChoice] | None,
        typer.Option("--hook", help="Only this kind of hook (repeat for several)."),
    ] = None,
) -> None:
    """Run SPEC with every hook and say which derivative each hook argument is.

    Two passes on identical builds (legacy register_backward_hook, then full backward hooks),
    each with forward, tensor, post-accumulate-grad and autograd Node hooks. Every gradient
    argument is labelled from the autograd graph and checked against a hook-free run; the
    chain rule is derived node by node. Exit 0 when every check holds, 1 when one fails,
    2 for a bad spec or option.
    """
    from gradexplain.derive import walk as run_walk
    from gradexplain.render.select import select
    from gradexplain.spec import load_spec

    loaded = load_spec(spec)
    if module is not None and module not in {item.path for item in loaded.root.walk()} | {
            f"{item.path}.{layer.name}".lstrip(".") for item in loaded.root.walk()
            for layer in item.layers}:
        raise UsageError(f"--module {module!r}: no such module in {spec} "
                         "(use a path such as module2 or module2.l)")
    result = run_walk(loaded, str(spec))
    modes: tuple[Mode, ...] = ("legacy", "full") if pass_ is PassChoice.both else (
        ("legacy",) if pass_ is PassChoice.legacy else ("full",))
    kinds: list[HookKind] = [item.value for item in hook or []]
    shown = select(result, modes, module, kinds)
    if output_format is Format.json:
        import json

        from gradexplain.render.json_walk import walk_json

        typer.echo(json.dumps(walk_json(shown), ensure_ascii=False, indent=1))
    else:
        from rich.console import Console

        from gradexplain.render.text_walk import walk_text

        if sys.stdout.isatty():
            Console().print(walk_text(shown))
        else:
            # Piped or redirected: 100 columns, no colour, no trailing padding on any line.
            console = Console(width=100, no_color=True, color_system=None)
            with console.capture() as captured:
                console.print(walk_text(shown))
            typer.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))
    if result.failures():
        raise typer.Exit(1)


def main() -> None:
    """Entry point of the `gradexplain` console script and `python -m gradexplain`."""
    try:
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
