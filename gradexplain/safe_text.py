"""Text as it may leave the program: the one function every output passes through.

Specs, saved sessions and the user's own Python (an `extra_repr`) put strings into what we print
and write. A string holding a terminal control sequence (`\\x1b]0;title\\x07`, `\\x1b[2J`) would
drive the user's terminal when shown, a bidi override would make the text read differently than
it is, and a lone surrogate (`\\ud800`) cannot be encoded as UTF-8 at all, so writing it fails.
`safe_text` shows each of them as an escape instead; every other character, backslashes
included, is left as it is, so every output without such characters is byte-for-byte unchanged.

Torch-free and rich-free: the command line, the renderers and `records.session` all use it.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline (our own layout uses them), DEL, the C1 controls, the bidi
# embeddings and overrides (U+202A-U+202E) and isolates (U+2066-U+2069), and the surrogates
# (only a lone one can be in a str: a pair is one code point).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# In one line (an error line on stderr) a newline or tab would break the line it is in.
_UNSAFE_IN_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


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
