"""Rich renderables as plain text: what piped output and the tests see (fixed width, no colour,
no trailing spaces), so the same run always gives the same characters."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

PIPE_WIDTH = 100


def plain_text(renderable: RenderableType, width: int = PIPE_WIDTH) -> str:
    # A file of its own: even capturing, rich writes (nothing) to its file and flushes it, which
    # on stdout to a full disk raises before the text is printed where the CLI catches it.
    console = Console(file=io.StringIO(), width=width, no_color=True, color_system=None)
    with console.capture() as captured:
        console.print(renderable)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())
