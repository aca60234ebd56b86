"""Markdown checks for tests: parse what a renderer wrote the way GitHub will read it, and fail on
anything that would render broken (a table row with a cell too many, math GitHub will not see
as math, LaTeX KaTeX rejects, a fence left open, raw HTML GitHub strips).

Shared by the tests of every markdown renderer (walk, diff, report): `assert_markdown_well_formed`
runs every check; the smaller helpers pull tables, math and fences out for assertions.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin

# Every command our renderers write, plus a few close relatives. KaTeX knows many more; a command
# outside this list is far more often a typo or a stray backslash than a deliberate choice.
KATEX_COMMANDS = frozenset({
    "frac", "dfrac", "tfrac", "partial", "nabla", "left", "right", "big", "Big", "bigg",
    "Bigg", "bigl", "bigr", "Bigl", "Bigr", "top", "mathrm", "text", "textbf", "textit",
    "texttt", "mathit", "mathbf", "mathsf", "mathtt", "operatorname", "mathrel", "mathbin",
    "sum", "prod", "odot", "cdot", "cdotp", "otimes", "oplus", "star", "times", "circ", "ast",
    "sigma", "epsilon", "varepsilon", "lambda", "mu", "alpha", "beta", "gamma", "delta",
    "theta", "pi", "tanh", "exp", "log", "ln", "sin", "cos", "tan", "sinh", "cosh", "arcsin",
    "arccos", "arctan", "max", "min", "sqrt", "hat", "widehat", "bar", "tilde", "vert",
    "lvert", "rvert", "Vert", "mid", "quad", "qquad", "geq", "leq", "neq", "to", "ldots",
    "cdots", "sim", "approx", "in", "wedge", "backslash", "textbackslash", "langle", "rangle",
    "mathbb"
})
# `\` followed by one non-letter: spacing and escaped specials.
SYMBOL_ESCAPES = frozenset(" ,;:!{}_#$%&|^~\\")
# Commands whose argument is text, not math: its letters are upright words.
TEXT_COMMANDS = frozenset({"text", "textbf", "textit", "texttt", "mbox"})
UPRIGHT_COMMANDS = TEXT_COMMANDS | {"mathrm", "operatorname", "mathit", "mathbf", "mathsf",
                                    "mathtt", "mathbb"}
DELIMITERS = frozenset({"(", ")", "[", "]", ".", "|", "/", r"\{", r"\}", r"\vert", r"\Vert",
                        r"\lvert", r"\rvert", r"\langle", r"\rangle", r"\|"})

_LATEX_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|\s+|.", re.DOTALL)


def parser() -> MarkdownIt:
    """CommonMark with GFM tables and `$...$` math, as GitHub reads them.

    No space is allowed inside the dollars (GitHub does not see `$ x$` as math). Escapes stay
    separate `text_special` tokens, so an escaped `\\$` is told apart from a stray one.
    """
    md = MarkdownIt("commonmark").enable("table")
    # allow_digits=False would match GitHub's currency rule better, but the plugin then reads
    # the character before position 0 as the last one of the line (negative index) and rejects
    # good math at the start of a cell that ends in a digit.
    dollarmath_plugin(md, allow_space=False)
    md.disable("text_join")
    return md


def parse(text: str) -> list[Token]:
    return parser().parse(text)


def walk_tokens(tokens: list[Token]) -> Iterator[Token]:
    """Every token, inline children included, in document order."""
    for token in tokens:
        yield token
        if token.children:
            yield from walk_tokens(token.children)


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every table as (header cells, rows of cells); cells are their markdown source.

    markdown-it pads short rows and drops extra cells silently, so each source line is also
    split the way GitHub splits it and must have as many cells as the header.
    """
    lines = text.split("\n")
    found: list[tuple[list[str], list[list[str]]]] = []
    tokens = parse(text)
    for index, token in enumerate(tokens):
        if token.type != "table_open":
            continue
        header: list[str] = []
        rows: list[list[str]] = []
        row: list[str] = []
        in_head = False
        for inner in tokens[index + 1:]:
            if inner.type == "table_close":
                break
            if inner.type == "thead_open":
                in_head = True
            elif inner.type == "thead_close":
                in_head = False
            elif inner.type == "tr_open":
                row = []
            elif inner.type == "inline":
                row.append(inner.content)
            elif inner.type == "tr_close":
                if in_head:
                    header = row
                else:
                    rows.append(row)
        assert token.map is not None
        start, end = token.map
        for number in range(start, end):
            cells = gfm_cells(lines[number])
            assert len(cells) == len(header), (
                f"line {number + 1} has {len(cells)} cells, the header {len(header)}: "
                f"{lines[number]!r}")
        found.append((header, rows))
    return found


def gfm_cells(line: str) -> list[str]:
    """A table line split as GitHub splits it: a backslash escapes the next character (so `\\|`
    is a pipe in the cell, `\\\\|` a backslash then a new cell); outer pipes are optional."""
    line = re.sub(r"^\s*(>\s?)*", "", line).strip()
    cells: list[str] = []
    current = ""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\" and index + 1 < len(line):
            current += line[index:index + 2]
            index += 2
            continue
        if char == "|":
            cells.append(current)
            current = ""
        else:
            current += char
        index += 1
    cells.append(current)
    if line.startswith("|"):
        cells = cells[1:]
    if line.endswith("|") and not line.endswith("\\|") and cells:
        cells = cells[:-1]
    return [cell.strip() for cell in cells]


def math_spans(text: str) -> list[str]:
    """The LaTeX of every inline and display math span, tables included."""
    kinds = {"math_inline", "math_inline_double", "math_block", "math_block_label"}
    return [token.content for token in walk_tokens(parse(text)) if token.type in kinds]


def fences(text: str, info: str) -> list[str]:
    """The contents of every fenced code block whose info string starts with `info`."""
    return [token.content for token in walk_tokens(parse(text))
            if token.type == "fence" and token.info.split(maxsplit=1)[:1] == [info]]


def section(text: str, title: str) -> str:
    """The markdown under the first heading whose text is `title`, up to the next heading of
    the same or a higher level (so its sub-sections are included)."""
    lines = text.split("\n")
    level = 0
    start = None
    for number, line in enumerate(lines):
        match = re.match(r"(#{1,6}) (.*?)\s*#*\s*$", line)
        if not match:
            continue
        if start is None and match.group(2) == title:
            level, start = len(match.group(1)), number + 1
        elif start is not None and len(match.group(1)) <= level:
            return "\n".join(lines[start:number])
    assert start is not None, f"no heading {title!r}"
    return "\n".join(lines[start:])


def assert_latex_well_formed(latex: str, extra_commands: Collection[str] = ()) -> None:
    """Fail unless KaTeX would typeset `latex` as intended: balanced braces, `\\left`/`\\right`
    paired inside the same group, known commands only, no stray `$ # % &`, no double
    superscript or subscript, no non-ASCII outside `\\text{}`, and no run of letters set in math
    italic (a name or a prose word that missed `\\mathrm` or `\\text`)."""
    where = f"in LaTeX {latex!r}"
    assert latex.strip(), "empty math"
    for special in "$#%&":
        assert not re.search(r"(?<!\\)" + re.escape(special), latex), \
            f"unescaped {special!r} {where}"
    allowed = KATEX_COMMANDS | set(extra_commands)
    tokens = _LATEX_TOKEN.findall(latex)
    # Frames: "{" a group, "arg" a script's braced argument, "text" a text command's argument,
    # "left" a \left...\right pair. Each frame tracks the scripts on its current atom.
    frames: list[tuple[str, set[str]]] = [("top", set())]
    expect: str | None = None  # "script" after ^/_, "text" after \text, "delim" after \left
    for token in tokens:
        if token.isspace():
            continue
        kind, scripts = frames[-1]
        if expect == "text" and token != "{":
            expect = None
        if expect == "delim":
            assert token in DELIMITERS, \
                f"\\left or \\right before {token!r}, not a delimiter {where}"
            expect = None
            if frames[-1][0] == "pending-right":
                frames.pop()
                frames[-1][1].clear()
            continue
        if token.startswith("\\") and len(token) == 2 and not token[1].isalpha():
            assert token[1] in SYMBOL_ESCAPES, f"unknown escape {token!r} {where}"
            if expect == "script":
                expect = None
            elif kind != "text":
                scripts.clear()
            continue
        if token.startswith("\\"):
            command = token[1:]
            assert command in allowed, f"unknown command {token!r} {where}"
            if command == "left":
                frames.append(("left", set()))
                expect = "delim"
                continue
            if command == "right":
                assert kind == "left", f"\\right without its \\left {where}"
                frames[-1] = ("pending-right", set())
                expect = "delim"
                continue
            if expect == "script":
                expect = None
                continue
            if kind != "text":
                scripts.clear()
            if command in TEXT_COMMANDS:
                expect = "text"
            continue
        if token == "{":
            frames.append(("text" if expect == "text" or kind == "text"
                           else "arg" if expect == "script" else "{", set()))
            expect = None
            continue
        if token == "}":
            assert kind in ("{", "arg", "text"), (
                f"unbalanced '}}' {where}" if kind == "top" else f"\\left without \\right {where}")
            frames.pop()
            if kind != "arg":
                frames[-1][1].clear()
            continue
        if kind == "text":
            continue
        if token in "^_":
            assert expect != "script", f"{token!r} right after a script {where}"
            double = "superscript" if token == "^" else "subscript"
            assert token not in scripts, f"double {double} {where}"
            scripts.add(token)
            expect = "script"
            continue
        if expect == "script":
            expect = None
            continue
        if token != "'":
            scripts.clear()
    assert expect is None, f"LaTeX ends inside a construct {where}"
    assert len(frames) == 1, (f"\\left without \\right {where}" if frames[-1][0] == "left"
                              else f"unbalanced '{{' {where}")
    outside_text = _strip_arguments(latex, TEXT_COMMANDS)
    assert outside_text.isascii(), f"non-ASCII outside \\text{{}} {where}"
    math_letters = re.sub(r"\\[A-Za-z]+|\\.", " ", _strip_arguments(latex, UPRIGHT_COMMANDS))
    word = re.search(r"[A-Za-z]{2,}", math_letters)
    assert word is None, f"{word.group(0)!r} would be set as italic variables {where}"


def _strip_arguments(latex: str, commands: Collection[str]) -> str:
    """`latex` without the braced arguments of `commands` (balanced, so `\\mathrm{z{:}mul}` goes
    whole)."""
    out = ""
    index = 0
    pattern = re.compile(r"\\(" + "|".join(sorted(commands)) + r")\s*\{")
    while True:
        match = pattern.search(latex, index)
        if match is None:
            return out + latex[index:]
        out += latex[index:match.start()] + " "
        depth, position = 1, match.end()
        while position < len(latex) and depth:
            if latex[position] == "\\":
                position += 2
                continue
            depth += {"{": 1, "}": -1}.get(latex[position], 0)
            position += 1
        index = position


def assert_markdown_well_formed(text: str, allowed_html: Collection[str] = ("<br>",)) -> None:
    """Every check at once: tables, math, stray dollars, raw HTML, fences, broken table rows."""
    tokens = parse(text)
    lines = text.split("\n")
    tables(text)
    for latex in math_spans(text):
        assert_latex_well_formed(latex)
    for token in walk_tokens(tokens):
        if token.type == "text":
            assert "$" not in token.content, (
                f"a '$' outside math (a math span GitHub will not see as math?): "
                f"{token.content!r}")
        elif token.type in ("html_inline", "html_block"):
            assert token.content.strip() in allowed_html, (
                f"raw HTML {token.content.strip()!r} (an unescaped '<'?)")
        elif token.type == "fence":
            assert token.map is not None
            start, end = token.map
            closing = lines[end - 1].strip() if end - 1 > start else ""
            marker = token.markup
            assert end - 1 > start and closing.startswith(marker) and \
                set(closing) == {marker[0]}, f"fence opened on line {start + 1} is never closed"
        elif token.type == "paragraph_open":
            assert token.map is not None
            for number in range(*token.map):
                assert not lines[number].lstrip("> ").startswith("|"), (
                    f"line {number + 1} looks like a table row but is not in a table: "
                    f"{lines[number]!r}")


__all__ = ["KATEX_COMMANDS", "assert_latex_well_formed", "assert_markdown_well_formed",
           "fences", "gfm_cells", "math_spans", "parse", "parser", "section", "tables",
           "walk_tokens"]
