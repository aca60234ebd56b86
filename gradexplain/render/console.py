"""Rich renderables as they leave the program: laid out by rich, their text escaped
(`safe_text`), then printed with rich's own styling. Piped output and the tests see plain text
(fixed width, no colour, no trailing spaces), so the same run always gives the same characters."""

from __future__ import annotations

import io
import sys
from typing import IO

from rich.console import Console, RenderableType
from rich.segment import Segment, Segments
from rich.text import Text

from gradexplain.render.plain import plain_lines
from gradexplain.safe_text import safe_text

PIPE_WIDTH = 100


def user_text(text: str, style: str = "") -> Text:
    """A string of the user's (a spec's name or about) as a Text, its unsafe characters shown
    as escapes now: rich drops some control characters (BEL, CR) when a Text is made, where
    every other output shows them as `\\x07`."""
    return Text(safe_text(text), style=style)


def title_line(name: str, source: str, torch_version: str) -> Text:
    """`two_modules  specs/two_modules.yaml  (torch 2.13.0)`: what every text output opens
    with."""
    return Text.assemble(user_text(name, "bold"),
                         user_text(f"  {source}  (torch {torch_version})"))


def terminal_console(file: IO[str] | None = None, stderr: bool = False) -> Console:
    """A console for the terminal, as wide as it says; at PIPE_WIDTH where it says nothing
    usable (`COLUMNS=0`, which rich takes as a width of nothing and prints nothing at)."""
    console = Console(file=file, stderr=stderr)
    return console if console.width >= 1 else Console(file=file, stderr=stderr,
                                                      width=PIPE_WIDTH)


def safe_print(console: Console, renderable: RenderableType) -> None:
    """Print `renderable` on `console` with no control character of the user's in it.

    The escapes go into the text of rich's segments, after layout and before rich writes its
    own escape codes for the segments' styles (at print time), so colours survive and only the
    user's characters change. Rich measured a control character as 0 columns, so a line holding
    one grows by its escape: it is not cropped (`crop=False`), nothing of it is lost."""
    segments = [segment if segment.control
                else Segment(safe_text(segment.text), segment.style, segment.control)
                for segment in console.render(renderable)]
    console.print(Segments(segments), crop=False)


def plain_text(renderable: RenderableType, width: int = PIPE_WIDTH) -> str:
    """`renderable` as rich lays it out at `width`, without colour, each line escaped
    (`safe_text`) and without trailing spaces; what is plain laid out without rich
    (`plain.py`: the same characters, at a fraction of the cost)."""
    # A file of its own: rich writes (nothing) to its file and flushes it, which on stdout to
    # a full disk would raise before the text is printed where the CLI catches it.
    console = Console(file=_Sink(), width=width, no_color=True, color_system=None)
    return "\n".join(safe_text(line).rstrip() for line in plain_lines(console, renderable, width))


class _Sink(io.StringIO):
    """The console's file: never written to, it has stdout's encoding, from which rich picks
    its box characters (ASCII ones for an ASCII stdout) as it did when stdout was its file."""

    @property
    def encoding(self) -> str:
        return getattr(sys.stdout, "encoding", None) or "utf-8"

    @encoding.setter
    def encoding(self, value: str) -> None:
        raise AttributeError("the sink's encoding is stdout's")
