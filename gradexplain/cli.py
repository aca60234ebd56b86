"""The command line: one call per pipeline stage, the only place that prints, errors to exit codes.

Imports stay light at module level: `gradexplain --help` and `gradexplain validate` must never
import torch, so anything that needs torch is imported inside the command that runs it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gradexplain import __version__
from gradexplain.errors import GradexplainError

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
