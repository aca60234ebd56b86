"""Rich renderables laid out as plain lines, without rich wherever rich would only copy them:
what a pipe and the tests get (`console.plain_text`), the same characters rich would lay out,
at a fraction of its cost (rich took ~10 s to lay out a 300-layer timeline, line by line).

Most of what gradexplain prints is already laid out by its renderers (`fit.py`, the columns of
`text_columns.py`): groups of one-line `Text`s, indented by `Padding`. A `Text` that fits in the
width, on one line, without tabs, is printed by rich as its characters; that is the fast path
here. Everything else (a line wider than the width, which rich wraps; a table; markup) is laid
out by rich itself, at the width it would have had, so the output is the same character for
character. Colour is not this module's business: a terminal still gets rich's own layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.segment import Segment
from rich.text import Text

# Renderables that lay themselves out into `Text`s by width: their `text_lines(width)`
# yields what their `__rich_console__` would, so that each line takes the fast path too; or,
# better, `plain_lines(width)` yields those Texts' characters alone (no Text made).
LinesAt = Callable[[int], Iterable[RenderableType]]
PlainAt = Callable[[int], Iterable[str]]


def plain_lines(console: Console, renderable: RenderableType, width: int) -> list[str]:
    """The lines `renderable` prints at `width` on `console` (which lays out, with rich,
    what is not plain), unescaped and untrimmed."""
    lines: list[str] = []
    _add(lines, console, renderable, width, None)
    return lines


def _add(lines: list[str], console: Console, renderable: RenderableType, width: int,
         indent: str | None) -> None:
    """`renderable`'s lines at `width`, each after `indent` (None at the top level, where
    rich does not crop a line; inside a Padding it does)."""
    if isinstance(renderable, Text):
        plain = renderable.plain
        if _one_line(renderable, plain, width):
            lines.append((indent or "") + plain)
            return
    elif isinstance(renderable, Group):
        for item in renderable.renderables:
            _add(lines, console, item, width, indent)
        return
    elif isinstance(renderable, Padding) and _left_only(renderable) and renderable.left < width:
        # An indent as wide as the line leaves its content no room: rich prints nothing of it,
        # and is left to (below).
        _add(lines, console, renderable.renderable, width - renderable.left,
             (indent or "") + " " * renderable.left)
        return
    else:
        plain_at: PlainAt | None = getattr(renderable, "plain_lines", None)
        if plain_at is not None:
            for plain in plain_at(width):
                if _plain_line(plain, width):
                    lines.append((indent or "") + plain)
                else:
                    _add(lines, console, Text(plain), width, indent)
            return
        text_lines: LinesAt | None = getattr(renderable, "text_lines", None)
        if text_lines is not None:
            for item in text_lines(width):
                _add(lines, console, item, width, indent)
            return
    lines += [(indent or "") + line
              for line in rich_lines(console, renderable, width, crop=indent is not None)]


def _one_line(text: Text, plain: str, width: int) -> bool:
    """Whether rich prints `text` as its characters: one line that fits, left-justified, no
    tab to expand, ending its line."""
    return (text.end == "\n" and text.justify in (None, "default", "left")
            and _plain_line(plain, width))


def _plain_line(plain: str, width: int) -> bool:
    """Whether rich prints a `Text(plain)` as its characters: one line that fits, no tab."""
    return "\n" not in plain and "\t" not in plain and _fits(plain, width)


# Characters rich measures one cell wide, met so far: most lines hold only these, and are
# measured without rich's per-character lookup (a third of the layout's time).
_NARROW: set[str] = set()


def _fits(plain: str, width: int) -> bool:
    """Whether `plain` takes at most `width` cells, as rich measures them."""
    if len(plain) > width:
        # More characters than cells (zero-width ones): rare, and left to rich, which wraps
        # such a line by its characters (a trailing U+2028 past the width is dropped).
        return False
    if plain.isascii() and plain.isprintable():
        return True
    new = set(plain).difference(_NARROW)
    if new:
        # One by one: a character one cell wide alone is one wherever it stands (a joiner or
        # variation selector, which changes its neighbour, is zero cells alone).
        if not all(cell_len(character) == 1 for character in new):
            return cell_len(plain) <= width
        _NARROW.update(new)
    return True


def _left_only(padding: Padding) -> bool:
    """Padding that only indents (rich pads the right to the width: trimmed anyway)."""
    return padding.expand and not (padding.top or padding.bottom)


def rich_lines(console: Console, renderable: RenderableType, width: int,
               crop: bool = False) -> list[str]:
    """What rich lays `renderable` out as at `width`, line by line, unescaped; lines wider
    than `width` cut, with `crop`, as rich cuts them inside a Padding."""
    segments = console.render(renderable, console.options.update_width(width))
    lines = (Segment.split_and_crop_lines(segments, width, pad=False) if crop
             else Segment.split_lines(segments))
    return ["".join(segment.text for segment in line if not segment.control)
            for line in lines]


__all__ = ["plain_lines", "rich_lines"]
