"""`safe_text`: which characters it escapes, how, and that it leaves everything else alone.

The oracle is Python itself: `unicodedata` says what a character is, `json.loads` says what a
JSON document means, UTF-8 encoding says whether text can be written.
"""

from __future__ import annotations

import json
import unicodedata

from gradexplain.safe_text import safe_text

BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
# Unicode's own line breaks beyond C0 and C1 (str.splitlines breaks there too), and the
# invisible characters that make two names look alike.
LINE_BREAKS = [0x2028, 0x2029]
INVISIBLE = [0x200B, 0x2060, 0xFEFF]
UNSAFE = [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0), *BIDI,
          *LINE_BREAKS, *INVISIBLE, 0xD800, 0xDBFF, 0xDC00, 0xDFFF]


def test_every_unsafe_character_is_escaped_as_its_code_point() -> None:
    for point in UNSAFE:
        shown = safe_text(f"a{chr(point)}b")
        assert shown.isascii() and shown.isprintable(), hex(point)
        escape = shown[1:-1]
        # The escape names the code point: \xNN below DEL, \uNNNN from DEL up.
        assert int(escape[2:], 16) == point
        assert escape.startswith("\\x" if point < 0x7F else "\\u"), escape


def test_no_line_break_is_left_but_newline() -> None:
    # The oracle: every character str.splitlines breaks a line at is escaped, newline aside.
    breaks = [chr(point) for point in range(0x110000)
              if len(f"a{chr(point)}b".splitlines()) == 2]
    assert breaks and "\n" in breaks
    for character in breaks:
        assert len(safe_text(f"a{character}b").splitlines()) == (2 if character == "\n" else 1)
        assert len(safe_text(f"a{character}b", one_line=True).splitlines()) == 1


def test_newline_and_tab_stay_unless_one_line() -> None:
    text = "a\nb\tc\rd"
    assert safe_text(text) == "a\nb\tc\\x0dd"
    assert safe_text(text, one_line=True) == "a\\x0ab\\x09c\\x0dd"


def test_everything_else_is_left_as_it_is() -> None:
    # Printable text of every script we print (Greek, maths, arrows, box drawing, LaTeX's
    # backslashes, an emoji outside the BMP) passes unchanged.
    text = "σ(t)(1−σ(t)) ⊙ Wᵀ → ∂z/∂y ✓ ✗ │ \\frac{a}{b} \\x1b literally 😀 é ß 中"
    assert safe_text(text) == text
    assert safe_text(text, one_line=True) == text
    others = [chr(point) for point in range(0x20, 0x3000)
              if point not in UNSAFE and unicodedata.category(chr(point)) != "Cs"]
    assert safe_text("".join(others)) == "".join(others)


def test_escaping_twice_is_escaping_once() -> None:
    text = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e\ud800\x7f\n\t"
    once = safe_text(text)
    assert safe_text(once) == once
    assert safe_text(safe_text(text, one_line=True), one_line=True) == safe_text(
        text, one_line=True)


def test_a_lone_surrogate_becomes_writable() -> None:
    text = "bad \ud800 here"
    shown = safe_text(text)
    assert shown == "bad \\ud800 here"
    shown.encode("utf-8")


def test_json_passed_through_is_the_same_document() -> None:
    # json.dumps escapes C0 itself; what it leaves (DEL, C1, bidi, a lone surrogate) becomes
    # JSON's own \u escape, so the document still parses to the same data.
    data = {"name": "pwn\x1b]0;t\x07\x1b[2J\x9b\u202e\u2069\x7f\ud800 end", "k\x85": [1.5, "é"]}
    for indent in (None, 1):
        text = safe_text(json.dumps(data, ensure_ascii=False, indent=indent))
        text.encode("utf-8")
        assert json.loads(text) == data
