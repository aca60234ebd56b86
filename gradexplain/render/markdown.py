"""GitHub-markdown building blocks shared by every markdown renderer (walk, diff, report).

Each helper returns a string that is safe where it is put: table cells that never split on a
stray `|`, inline math that GitHub and markdown-it both recognise, code spans that survive
backticks, plain text whose `*`, `_` or `<` stay literal. Renderers compose these and never
write markdown syntax by hand where a helper exists. No torch here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Literal
from urllib.parse import quote

Align = Literal["left", "right", "center"]

# Characters that could start markdown syntax inside a line of text (CommonMark lets any ASCII
# punctuation be backslash-escaped, so escaping more than needed is harmless). An `_` inside a
# word cannot open or close emphasis, so `grad_input` stays as it is, easier to read and grep.
_SPECIALS = re.compile(r"([\\`*\[\]<>#|$~&!]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
# A line that would otherwise open a list, a heading underline or a block quote.
_LINE_START = re.compile(r"^(\s*)([-+=]|\d+(?=[.)]))")
_URL = re.compile(r"https?://[^\s<>`]+")
_URL_TRAILING = ".,;:!?)]'\""
# A `|` that is not already backslash-escaped.
_BARE_PIPE = re.compile(r"(?<!\\)\|")


def heading(level: int, text: str) -> str:
    """An ATX heading; levels beyond markdown's 1-6 are clamped, so nesting never breaks it."""
    return f"{'#' * min(max(level, 1), 6)} {text}"


def escape(text: str, block: bool = False) -> str:
    """Plain text as markdown that shows exactly that text.

    URLs become `<...>` autolinks: escaping the `_` or `#` inside them would cut GitHub's
    bare-URL autolinks short. Newlines are kept; a line that would open a list or a heading
    underline is escaped, the first line too when `block` says the text starts a line.
    """
    parts: list[str] = []
    position = 0
    for match in _URL.finditer(text):
        url = match.group(0).rstrip(_URL_TRAILING)
        parts.append(_SPECIALS.sub(r"\\\1", text[position:match.start()]))
        parts.append(f"<{url}>")
        position = match.start() + len(url)
    parts.append(_SPECIALS.sub(r"\\\1", text[position:]))
    lines = "".join(parts).split("\n")
    start = 0 if block else 1
    lines[start:] = [_LINE_START.sub(_escape_line_start, line) for line in lines[start:]]
    return "\n".join(lines)


def _escape_line_start(match: re.Match[str]) -> str:
    indent, marker = match.group(1), match.group(2)
    if marker.isdigit():
        # `1.` opens an ordered list; escaping the punctuation after the number prevents it.
        return indent + marker + "\\"
    return indent + "\\" + marker


def file_link(text: str, file: str) -> str:
    """A link showing `text` to the file named `file` beside the page. The name's bytes are
    percent-encoded, so a space, `)`, `<` or `|` neither ends the link nor becomes HTML, and a
    name that is not UTF-8 (its bytes kept as surrogates) still points at the file."""
    return f"[{escape(text)}]({quote(os.fsencode(file), safe='')})"


def code(text: str) -> str:
    """Inline code showing `text` verbatim, whatever backticks it holds; "" for empty text."""
    text = text.replace("\r\n", " ").replace("\n", " ")
    if not text:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    # CommonMark strips one space from each end of a span that starts or ends with a backtick
    # or is padded on both sides; pad so the text itself survives.
    if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and
                                                      text.endswith(" ") and text.strip()):
        text = f" {text} "
    return f"{fence}{text}{fence}"


def math(latex: str) -> str:
    """Inline math `$...$` that GitHub renders and that never splits a table cell.

    `|` becomes `\\vert ` and `\\|` `\\Vert ` (either would end the cell), a bare `#` is
    escaped (KaTeX rejects it; synthetic names such as `mul#1` carry one), newlines become
    spaces, and the ends are trimmed because a space right inside a dollar stops GitHub seeing
    math.
    """
    text = " ".join(latex.split("\n"))
    # `\|` too: in a table GFM would read it as an escaped pipe and leave a bare `|`.
    text = text.replace("\\|", "\\Vert ")
    text = _BARE_PIPE.sub(r"\\vert ", text)
    text = re.sub(r"(?<!\\)#", r"\\#", text)
    text = re.sub(r"(?<!\\)\$", r"\\$", text).strip()
    return f"${text}$" if text else ""


def bold(text: str) -> str:
    """Strong emphasis around markdown that is already escaped."""
    return f"**{text}**" if text else ""


def italic(text: str) -> str:
    """Emphasis around markdown that is already escaped."""
    return f"_{text}_" if text else ""


def table(headers: Sequence[str], rows: Sequence[Sequence[str]],
          align: Sequence[Align | None] | None = None) -> str:
    """A GFM table. Cells are markdown already (escape plain text first); here a bare `|` is
    escaped, which GFM honours inside code spans and math too, and newlines become `<br>`."""
    width = len(headers)
    if width == 0:
        raise ValueError("a table needs at least one column")
    for number, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"row {number} has {len(row)} cells, the header has {width}")
    alignment = list(align) if align is not None else [None] * width
    if len(alignment) != width:
        raise ValueError(f"{len(alignment)} alignments for {width} columns")
    markers = {None: "---", "left": ":---", "right": "---:", "center": ":---:"}
    lines = [_row(headers), "| " + " | ".join(markers[item] for item in alignment) + " |"]
    lines += [_row(row) for row in rows]
    return "\n".join(lines)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _cell(text: str) -> str:
    text = _BARE_PIPE.sub(r"\\|", text)
    return "<br>".join(line.strip() for line in text.strip().splitlines())


def bullets(items: Sequence[str]) -> str:
    """A bullet list; items are markdown already, continuation lines are indented to stay in."""
    return "\n".join("- " + item.replace("\n", "\n  ") for item in items)


def blocks(*parts: str) -> str:
    """Block-level pieces separated by blank lines, empty ones dropped; ends with a newline."""
    return "\n\n".join(part.strip("\n") for part in parts if part.strip()) + "\n"


__all__ = ["Align", "blocks", "bold", "bullets", "code", "escape", "file_link", "heading",
           "italic", "math", "table"]
