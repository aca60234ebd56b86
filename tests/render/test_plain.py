"""Plain layout (render/plain.py): what `plain_text` lays out without rich is what rich lays out,
character for character, whatever the text (wide and zero-width characters, tabs, newlines,
control characters, lines too long for the width), and piped output holds no escape codes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradexplain.render.console import _Sink, plain_text, safe_print
from tests.helpers.cli import REPO

# Characters rich measures 0, 1 and 2 cells wide, and those it treats specially.
PIECES = st.sampled_from(["a", "b", " ", "  ", "∂", "✓", "ᵀ", "→", "漢", "字", "é", "e\u0301",
                          "\u200d", "\ufe0f", "\t", "\n", "\x1b", "\x07", "\u2028", "\xa0",
                          "[1, 2]", "word", "x" * 30])
TEXTS = st.lists(PIECES, max_size=12).map("".join)


def rich_only(renderable: RenderableType, width: int) -> str:
    """What plain_text gave before it took the plain path: everything laid out by rich."""
    from gradexplain.safe_text import safe_text

    console = Console(file=_Sink(), width=width, no_color=True, color_system=None)
    with console.capture() as captured:
        safe_print(console, renderable)
    return "\n".join(safe_text(line).rstrip() for line in captured.get().splitlines())


def renderables() -> st.SearchStrategy[RenderableType]:
    text = st.builds(lambda plain, no_wrap, style: Text(plain, no_wrap=no_wrap, style=style),
                     TEXTS, st.booleans(), st.sampled_from(["", "bold", "dim"]))

    def table(cells: list[str]) -> Table:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column()
        for cell in cells:
            grid.add_row("•", cell)
        return grid

    leaves = text | st.lists(TEXTS, max_size=3).map(table)
    return st.recursive(leaves, lambda inner: (
        st.lists(inner, max_size=4).map(lambda items: Group(*items))
        | st.builds(lambda item, left: Padding(item, (0, 0, 0, left)), inner,
                    st.integers(0, 8))), max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(renderables(), st.integers(12, 100))
def test_plain_layout_is_rich_layout(renderable: RenderableType, width: int) -> None:
    assert plain_text(renderable, width) == rich_only(renderable, width)


def test_an_indent_as_wide_as_the_line_prints_as_rich_prints_it() -> None:
    """Found by the property above: nested indents adding up to the whole width leave their
    text no room, and rich prints no line for it."""
    nested = Padding(Padding(Text(""), (0, 0, 0, 4)), (0, 0, 0, 8))
    for renderable in (Group(Text(""), nested), nested, Group(nested, Text("after"))):
        for width in (12, 10, 13):
            assert plain_text(renderable, width) == rich_only(renderable, width), width


def test_the_walk_timeline_is_laid_out_as_rich_lays_it_out() -> None:
    from gradexplain.api import Explanation
    from tests.helpers.capture import captured

    for spec in ("cnn_hooks.yaml", "second_backward.yaml", "wrong_replacement.yaml"):
        text = Explanation(captured(spec)).text(collapse=False, timeline=True)
        for width in (60, 100, 140):
            assert plain_text(text, width) == rich_only(text, width)


def test_piped_text_is_plain() -> None:
    """A pipe gets no escape codes (no colour, no cursor movement), even asked for colour."""
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    for args in (["walk", "specs/wrong_replacement.yaml", "--timeline"],
                 ["diff", "specs/two_modules.yaml"]):
        done = subprocess.run([sys.executable, "-m", "gradexplain", *args], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120,
                              check=False)
        assert done.stdout, args
        assert b"\x1b" not in done.stdout, args
        assert not re.search(rb"[\x00-\x08\x0b-\x1f]", done.stdout), args



def test_a_zero_width_space_past_a_full_line_is_dropped_as_rich_drops_it() -> None:
    """Found by the property above: a line whose visible characters fill the width, then a
    zero-width whitespace (U+2028): rich wraps by characters and drops it; the plain path
    kept it."""
    for text in ("aaaaaa  word\u2028", "abcdefghijkl\u2028", "e\u0301" * 12):
        assert plain_text(Text(text), 12) == rich_only(Text(text), 12), text
