"""The spec language: YAML file -> checked ModelSpec.

Never imports torch: `gradexplain validate` must stay light.

    load_spec(path) = check_ranks(check_spec(read_spec(read_document(path))))

`check_ranks` (ranks.py) makes each rank's spec of a `distributed:` section, and checks a split
batch's part with `check_spec` again: it runs after the spec itself is checked.
"""

from __future__ import annotations

from pathlib import Path

from gradexplain.language.check import check_spec
from gradexplain.language.model import ModelSpec
from gradexplain.language.ranks import check_ranks, rank_specs
from gradexplain.language.schema import read_spec
from gradexplain.language.specfile import read_document, read_text
from gradexplain.language.yamlio import parse_document


def load_spec(path: Path | str, display_name: str | None = None) -> ModelSpec:
    """Read, parse and check a spec file. Raises a SpecError subclass for any bad input."""
    return check_ranks(check_spec(read_spec(read_document(Path(path), display_name))))


def read_spec_text(path: Path | str) -> str:
    """A spec file's text, read within the size bound (for a session to keep what it ran)."""
    return read_text(Path(path), str(path))


def load_spec_text(text: str, file: str = "<spec>") -> ModelSpec:
    """The same for YAML text already in memory (tests, the Python API)."""
    return check_ranks(check_spec(read_spec(parse_document(text, file))))


__all__ = ["ModelSpec", "load_spec", "load_spec_text", "rank_specs", "read_spec_text"]
