"""The two ways the command line starts faster than typer alone would: `validate FILE...` read
without typer, and a shell's completion request answered without converting values (which
would import pydantic). Neither prints; `cli.main` calls both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


__all__ = ["COMPLETION_VARIABLE", "completion_without_coercion", "plain_validate_files"]
