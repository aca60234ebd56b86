"""The ways the command line starts faster than typer alone would: `validate FILE...` read
without typer, a shell's completion request answered without converting values, every other
command's values converted without pydantic where they can be (`cli_conversion`). (The garbage
collector's pause during start-up is `collector.py`'s.) None prints; `cli.main` calls them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer


def plain_validate_files(argv: list[str]) -> list[Path] | None:
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


# What the shell sets when it asks for completions (typer's name: `_{PROG}_COMPLETE`).
COMPLETION_VARIABLE = "_GRADEXPLAIN_COMPLETE"


@contextmanager
def completion_without_coercion() -> Iterator[None]:
    """While answering a shell's completion request, leave parameter values unconverted.

    typer (0.2x) converts every value it parses through a pydantic adapter, and completion parses
    the command line typed so far; importing pydantic would double the time a <TAB> takes. The
    completions need only the words typed, not converted values (no completer here reads them),
    so under click's resilient parsing, which completion uses, values pass through as they are.
    Older typers have no such parameter class and need nothing.
    """
    parameter = _typer_parameter()
    if COMPLETION_VARIABLE not in os.environ or parameter is None:
        yield
        return
    convert = parameter.process_value

    def process_value(self: object, ctx: typer.Context, value: object) -> object:
        if ctx.resilient_parsing:
            return value
        return convert(self, ctx, value)

    with _replaced(parameter, "process_value", process_value):
        yield


@contextmanager
def conversion_without_pydantic() -> Iterator[None]:
    """While typer parses the command line, its parameters convert values without pydantic
    where they can (`cli_conversion`: str, Path, bounded int, parsed choices, lists of them),
    and through typer's own pydantic conversion otherwise.

    typer (0.2x) builds a pydantic adapter for every parameter it processes, given or not:
    importing pydantic and building walk's 16 took 0.08 s, three times its run of two_modules.
    Typer still reads the command line, from the commands' own declarations, and says every
    usage error (a bad value goes on to its conversion, which words the complaint). Older
    typers, without this conversion, need nothing.
    """
    parameter = _typer_parameter()
    try:
        from gradexplain.cli_conversion import quick_conversion
    except ImportError:  # a typer whose private classes moved: its own conversion, unchanged
        parameter = None
    if parameter is None or not hasattr(parameter, "get_runtime_param"):
        yield
        return

    typer_conversion = parameter.get_runtime_param

    def get_runtime_param(self: Any) -> object:
        return quick_conversion(self, lambda: typer_conversion(self))

    with _replaced(parameter, "get_runtime_param", get_runtime_param):
        yield


def _typer_parameter() -> Any:
    """typer's parameter class that converts values (typer 0.2x), or None."""
    return getattr(getattr(typer, "core", None), "_TyperParameter", None)


@contextmanager
def _replaced(owner: Any, name: str, replacement: Callable[..., object]) -> Iterator[None]:
    """`owner.name` is `replacement` inside, the original again after."""
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


__all__ = [
    "COMPLETION_VARIABLE",
    "completion_without_coercion",
    "conversion_without_pydantic",
    "plain_validate_files",
]
