"""What a command's SPEC argument names: a YAML spec file, or a Python model (`file.py:name`,
`pkg.module:name`). Plain text rules, no torch: the command line decides before importing it."""

from __future__ import annotations

import re

TARGET = re.compile(r"^(?P<where>.+):(?P<attr>[A-Za-z_][\w.]*)$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def is_python_target(text: str) -> bool:
    """Whether a command-line SPEC names Python (`file.py:name`, `pkg.mod:name`), not YAML."""
    match = TARGET.match(text)
    if match is None:
        return False
    where = match.group("where")
    return where.endswith(".py") or _MODULE.match(where) is not None
