"""Text as it may leave the program: the one function every output passes through.

Specs, saved sessions and the user's own Python (an `extra_repr`) put strings into what we print
and write. A string holding a terminal control sequence (`\\x1b]0;title\\x07`, `\\x1b[2J`) would
drive the user's terminal when shown, a bidi override would make the text read differently than
it is, a line separator would start a line of its own, and a lone surrogate (`\\ud800`) cannot
be encoded as UTF-8 at all, so writing it fails. `safe_text` shows each of them as an escape
instead; every other character, backslashes included, is left as it is, so every output without
such characters is byte-for-byte unchanged.

Torch-free and rich-free: the command line, the renderers and `records.session` all use it.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline (our own layout uses them), DEL, the C1 controls; the line and
# paragraph separators (U+2028, U+2029: rich and editors break the line there, so a name could
# start a line of its own, "error: ..."); the bidi marks (U+061C, U+200E, U+200F), embeddings
# and overrides (U+202A-U+202E) and isolates (U+2066-U+2069); the invisible zero-width space,
# word joiner and byte order mark (U+200B, U+2060, U+FEFF: two names would look the same); and
# the surrogates (only a lone one can be in a str: a pair is one code point). The zero-width
# (non-)joiners U+200C and U+200D stay: scripts and emoji need them.
_OTHERS = "\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_OTHERS}]")
# In one line (an error line on stderr) a newline or tab would break the line it is in.
_UNSAFE_IN_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_OTHERS}]")


def _escape(match: re.Match[str]) -> str:
    point = ord(match.group())
    # `\u` from DEL up: JSON's own escape, so a JSON document (whose C0 controls json.dumps
    # has already escaped) passed through here is still valid JSON and parses to the same data.
    return f"\\x{point:02x}" if point < 0x7F else f"\\u{point:04x}"


def safe_text(text: str, *, one_line: bool = False) -> str:
    """`text` with every unsafe character shown as its escape (`\\x1b`, `\\u009b`, `\\u202e`,
    `\\ud800`); with `one_line`, newlines, carriage returns and tabs too. Escaping twice gives
    what escaping once did: the escapes are plain ASCII."""
    pattern = _UNSAFE_IN_LINE if one_line else _UNSAFE
    return pattern.sub(_escape, text)


__all__ = ["safe_text"]
