"""Rich renderables as plain text: what piped output and the tests see (fixed width, no colour,
no trailing spaces), so the same run always gives the same characters."""

from __future__ import annotations

import io
import sys

from rich.console import Console, RenderableType

PIPE_WIDTH = 100


def plain_text(renderable: RenderableType, width: int = PIPE_WIDTH) -> str:
    # A file of its own: even capturing, rich writes (nothing) to its file and flushes it, which
    # on stdout to a full disk raises before the text is printed where the CLI catches it.
    console = Console(file=_Sink(), width=width, no_color=True, color_system=None)
    with console.capture() as captured:
        console.print(renderable)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


class _Sink(io.StringIO):
    """The console's file: never written to, it has stdout's encoding, from which rich picks
    its box characters (ASCII ones for an ASCII stdout) as it did when stdout was its file."""

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"

    @encoding.setter
    def encoding(self, value: str) -> None:
        raise AttributeError("the sink's encoding is stdout's")
