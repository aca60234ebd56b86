"""The markdown building blocks (render/markdown.py): escaped text shows itself, code is verbatim,
tables keep pipes and newlines inside their cells, math is trimmed and table safe."""

from __future__ import annotations

import pytest

from gradexplain.render.markdown import code, escape, math, table
from tests.helpers.mdcheck import (
    assert_markdown_well_formed,
    parse,
    tables,
    walk_tokens,
)

# --- the building blocks ---------------------------------------------------------------------


def plain(markdown: str) -> str:
    """What a reader sees of one line of inline markdown: its text, escapes resolved."""
    return "".join(token.content for token in walk_tokens(parse(markdown))
                   if token.type in ("text", "text_special", "code_inline", "math_inline"))


@pytest.mark.parametrize("text", [
    "p * x and y_1 * w_2", "<model>", "[0.5](x)", "# not a heading", "a | b", "$5 and $6",
    "- not a list", "1. not a list", "`tick`", "~~no~~", "back\\slash", "&amp;", "!(x)",
    "_em_ and __strong__", "grad_input[0] of x_temp", "snake_case *b*",
])
def test_escape_shows_the_text_itself(text: str) -> None:
    markdown = escape(text, block=True)
    assert plain(markdown) == text
    assert_markdown_well_formed(markdown)
    assert [token.type for token in parse(markdown)] == [
        "paragraph_open", "inline", "paragraph_close"]


def test_escape_keeps_urls_clickable() -> None:
    url = "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html#torch.nn.Module.x_y"
    tokens = list(walk_tokens(parse(escape(f"See {url}."))))
    assert [token.attrs.get("href") for token in tokens if token.type == "link_open"] == [url]


@pytest.mark.parametrize("text", ["plain", "a`b", "``x``", "`edge`", "a | b", " spaced "])
def test_code_is_verbatim(text: str) -> None:
    spans = [token.content for token in walk_tokens(parse(code(text)))
             if token.type == "code_inline"]
    assert spans == [text]


def test_table_keeps_pipes_and_newlines_inside_cells() -> None:
    markdown = table(["a", "b"], [["x | y", code("p|q")], ["one\ntwo", math(r"\vert x|")]])
    assert_markdown_well_formed(markdown)
    headers, rows = tables(markdown)[0]
    assert headers == ["a", "b"]
    assert rows == [["x | y", "`p|q`"], ["one<br>two", r"$\vert x\vert$"]]
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        table(["a", "b"], [["only one"]])


def test_math_is_trimmed_and_table_safe() -> None:
    assert math("  x  ") == "$x$"
    assert math("a|b") == r"$a\vert b$"
    assert math(r"\mathrm{mul#1}") == r"$\mathrm{mul\#1}$"
    assert math("") == ""
