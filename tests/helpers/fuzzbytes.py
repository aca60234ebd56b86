"""Spec files for the fuzz tests (tests/test_fuzz.py), part 3: byte mutations, and the mix.

Byte mutations work on a seed's file itself: empty, whitespace or comments only, binary junk,
invalid UTF-8, truncation, characters inserted or deleted, byte-order marks, tabs, CR and CRLF
line ends, files over and just under the 1,000,000-byte bound. `spec_files` mixes them with the
tree mutations of tests/helpers/fuzztrees.py: the strategy the fuzz tests draw from.

Every drawn file carries its story, as in fuzztrees.py. Nothing here runs gradexplain.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from tests.helpers.fuzzseeds import (
    SEED_NAMES,
    SEED_TEXTS,
    RawSlots,
    SpecFile,
    emit,
    load_seed,
)
from tests.helpers.fuzztrees import (
    GENTLE_MUTATORS,
    mutated_specs,
)

# --- byte mutations ----------------------------------------------------------------------------

BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00", b"\xef\xbb\xbf" * 2)
BAD_UTF8 = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\x80",
            b"\xe2\x82")
JUNK = (b"\x00", b"\x1b[31m", b"\x07", b"\r", b"\x0c", b"\x85", b"\xc2\x85", b"\xe2\x80\xa8",
        b"\t", b"%YAML 1.1\n", b"%TAG ! tag:x,2000:\n", b"---\n", b"...\n", b"--- |\n",
        b"&a ", b"*a", b"!!", b"? ", b": ", b"- ", b"{", b"[", b"'", b'"', b"#", b"|", b">",
        b"@", b"`", b"%", b"\\")
LIMIT = 1_000_000
SMALL_KINDS = ("empty", "blank", "comments", "binary", "bad_utf8", "truncate", "insert", "delete",
               "bom", "tabs", "crlf", "cr", "junk", "utf16", "duplicate", "nul_padding",
               "documents")
LARGE_KINDS = ("over_limit", "at_limit", "under_limit_steps", "under_limit_about", "long_line")


@st.composite
def byte_specs(draw: st.DrawFn) -> SpecFile:
    """A seed's bytes, or nothing like a seed: broken at the level of bytes and lines."""
    seed = draw(st.sampled_from(SEED_NAMES))
    base = SEED_TEXTS[seed].encode("utf-8")
    # Files near the size bound take a second or more each to read: about one case in eight.
    kind = draw(st.sampled_from(SMALL_KINDS * 2 + LARGE_KINDS))
    data = base
    if kind == "empty":
        data = b""
    elif kind == "blank":
        data = draw(st.sampled_from((b" ", b"\n", b"\n\n\n", b"\t", b"   \n \t\n", b"\r\n")))
    elif kind == "comments":
        data = draw(st.sampled_from((b"# only a comment\n", b"#", b"# a\n# b\n\n", b"---\n#\n",
                                     b"...\n", b"---\n...\n", b"%YAML 1.1\n---\n")))
    elif kind == "binary":
        data = draw(st.binary(max_size=300))
    elif kind == "bad_utf8":
        at = draw(st.integers(0, len(base)))
        data = base[:at] + draw(st.sampled_from(BAD_UTF8)) + base[at:]
    elif kind == "truncate":
        data = base[:draw(st.integers(0, len(base)))]
    elif kind == "insert":
        at = draw(st.integers(0, len(base)))
        text = "".join(draw(st.lists(st.characters(), min_size=1, max_size=4)))
        data = base[:at] + text.encode("utf-8", "surrogatepass") + base[at:]
    elif kind == "delete":
        at = draw(st.integers(0, len(base)))
        data = base[:at] + base[at + draw(st.integers(1, 20)):]
    elif kind == "bom":
        data = draw(st.sampled_from(BOMS)) + base
    elif kind == "tabs":
        data = base.replace(b"  ", b"\t")
    elif kind == "crlf":
        data = base.replace(b"\n", b"\r\n")
    elif kind == "cr":
        data = base.replace(b"\n", b"\r")
    elif kind == "junk":
        at = draw(st.integers(0, len(base)))
        data = base[:at] + draw(st.sampled_from(JUNK)) + base[at:]
    elif kind == "utf16":
        data = base.decode("utf-8").encode(draw(st.sampled_from(("utf-16", "utf-16-le",
                                                                 "utf-32"))))
    elif kind == "duplicate":
        data = base + draw(st.sampled_from((b"", b"---\n"))) + base
    elif kind == "over_limit":
        data = base + b"#" * (LIMIT + 1 - len(base) - 1) + b"\n" + b"#" * draw(st.integers(0, 9))
    elif kind == "at_limit":
        data = base + b"#" * (LIMIT - len(base) - 1) + b"\n"
    elif kind == "under_limit_steps":
        data = _padded_with_steps(seed, draw(st.integers(LIMIT - 50_000, LIMIT)))
    elif kind == "under_limit_about":
        data = _padded_about(seed, draw(st.integers(LIMIT - 50_000, LIMIT)))
    elif kind == "long_line":
        data = base + b"about2: " + b"x" * draw(st.sampled_from((10_000, 100_000, 900_000)))
    elif kind == "nul_padding":
        data = base + b"\x00" * draw(st.integers(1, 1_000))
    else:
        data = b"---\n" + base + b"\n---\n" + base
    return SpecFile(data, (f"seed {seed}", f"bytes: {kind}", f"{len(data):,} bytes"))


def _padded_with_steps(seed: str, size: int) -> bytes:
    """The seed with many top-level steps in front of its forward, `size` bytes or just under
    (written as JSON, which is YAML too, because the C encoder makes a megabyte quickly)."""
    tree = load_seed(seed)
    inputs = tree.get("inputs") or {"x": 1.0}
    tree["inputs"] = inputs
    source = next(iter(inputs))
    forward = tree["forward"] if isinstance(tree["forward"], list) else []
    tree["forward"] = forward
    base = len(json.dumps(tree, ensure_ascii=False).encode("utf-8"))
    steps: list[str] = []
    while True:
        step = f"pad_{len(steps)} = {source} * 1.0"
        cost = len(step) + 4  # the quotes, the comma and the space
        if base + cost > size:
            break
        steps.append(step)
        base += cost
    tree["forward"] = steps + forward
    return json.dumps(tree, ensure_ascii=False).encode("utf-8")


def _padded_about(seed: str, size: int) -> bytes:
    """The seed with an `about` long enough to make the file exactly `size` bytes."""
    tree = load_seed(seed)
    tree["about"] = ""
    head = emit(tree, "block", RawSlots()).encode("utf-8")
    filler = max(0, size - len(head))
    return head.replace(b"about: ''", b"about: '" + b"a" * filler + b"'", 1)


def spec_files(gentle_share: int = 1) -> st.SearchStrategy[SpecFile]:
    """The fuzz input: tree mutations, gentle ones (mostly valid, so the run is exercised), and
    byte mutations."""
    return st.one_of(
        mutated_specs(),
        *[mutated_specs(GENTLE_MUTATORS, most=2)] * gentle_share,
        byte_specs(),
    )
