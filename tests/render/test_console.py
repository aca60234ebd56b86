"""`safe_print` and `plain_text`: rich output with the user's control characters escaped and
rich's own styling kept, on a terminal (colour) and piped (plain). The oracle is rich itself:
`Console.print` of the same renderable, on the same console."""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradexplain.analysis.diff import compare
from gradexplain.render.console import plain_text, safe_print
from gradexplain.render.text_diff import diff_text
from gradexplain.render.text_walk import walk_text
from tests.helpers.capture import captured

HOSTILE = "pwn\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e\u2066\x7f\ud800end"


def terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=100)


def printed(renderable: RenderableType, safe: bool) -> str:
    console = terminal()
    if safe:
        safe_print(console, renderable)
    else:
        console.print(renderable)
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def hostile_renderable() -> RenderableType:
    table = Table("module", "argument")
    table.add_row(HOSTILE, Text(HOSTILE, style="bold red"))
    # 80 columns to rich (a control character is 0 wide), 120 once escaped.
    long_line = Padding(Text("y" * 80 + "\x1b" * 10), (0, 0, 0, 4))
    return Group(Text(HOSTILE, style="bold red"), long_line, table)


def test_our_own_output_is_printed_exactly_as_rich_prints_it() -> None:
    """No escape where there is nothing to escape: the colours and the layout of a real walk
    and diff are rich's, byte for byte."""
    for spec in ("two_modules.yaml", "cnn_hooks.yaml"):
        session = captured(spec)
        for renderable in (walk_text(session.walk, timeline=True), diff_text(compare(session))):
            colour = printed(renderable, safe=True)
            assert "\x1b[" in colour  # rich styled it: our styling survives
            assert colour == printed(renderable, safe=False)


def test_the_users_control_characters_are_escaped_and_our_colours_kept() -> None:
    shown = printed(hostile_renderable(), safe=True)
    shown.encode("utf-8")  # the lone surrogate is escaped, so the text can be written
    assert "\x1b[1;31m" in shown  # rich's bold red
    # Every ESC left is the start of one of rich's SGR codes (ESC [ digits ; m), never ours.
    for start in range(len(shown)):
        if shown[start] == "\x1b":
            end = shown.index("m", start)
            assert shown[start + 1] == "[" and all(
                c.isdigit() or c == ";" for c in shown[start + 2:end]), repr(shown[start:end + 1])
    assert not {chr(c) for c in [*range(0x80, 0xA0), 0x202E, 0x2066, 0x7F, 0x07]} & set(shown)
    assert shown.count("\\x1b]0;pwned") == 3
    assert shown.count("\\u009b31m\\u202e\\u2066\\u007f\\ud800end") == 3


def test_an_escaped_line_is_never_cropped() -> None:
    """Rich measured the control characters as 0 columns: the line grows, nothing is lost."""
    text = plain_text(hostile_renderable())
    assert "    " + "y" * 80 + "\\x1b" * 10 + "\n" in text
    assert text.count("\\ud800end") == 3
    assert not any(0 <= ord(c) < 0x20 and c != "\n" for c in text)
