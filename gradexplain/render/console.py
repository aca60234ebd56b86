"""Rich renderables as plain text: what piped output and the tests see (fixed width, no colour,
no trailing spaces), so the same run always gives the same characters."""

from __future__ import annotations

from rich.console import Console, RenderableType

PIPE_WIDTH = 100


def plain_text(renderable: RenderableType, width: int = PIPE_WIDTH) -> str:
    console = Console(width=width, no_color=True, color_system=None)
    with console.capture() as captured:
        console.print(renderable)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())
