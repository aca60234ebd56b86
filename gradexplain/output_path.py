"""A path into a Python model's output: what `--loss-of` and `explain(output=...)` select as the
tensor (or part) backward starts from. Plain text rules, no torch: a malformed path is reported
before the model is loaded; `capture.outputs` follows a parsed path through the real output.

The syntax: parts joined by dots, each an index into a tuple or list (`0`), or a key of a dict
or a field of a dataclass or namedtuple (`logits`). `0.1` is `output[0][1]`, `hidden.0` is
`output["hidden"][0]`. A key that itself contains a dot cannot be selected.
"""

from __future__ import annotations

import re

from gradexplain.errors import UsageError

OutputPath = tuple[str, ...]
WHOLE: OutputPath = ()  # the whole output, the default

_PART = re.compile(r"^[^.\s]+$")


def parse_output_path(text: str, flag: str = "--loss-of") -> OutputPath:
    """`0.1` -> ("0", "1"); `logits` -> ("logits",). UsageError for an empty part."""
    parts = tuple(text.strip().split("."))
    if not text.strip() or not all(_PART.match(part) for part in parts):
        raise UsageError(f"{flag} {text!r}: expected a path such as 0, logits or 0.1 (tuple "
                         "indices and dict keys joined by dots, no spaces or empty parts)")
    return parts


def path_text(path: OutputPath) -> str:
    """The path as typed: `1.0`; the whole output is `` (empty)."""
    return ".".join(path)


def python_form(path: OutputPath) -> str:
    """The path as Python reads it: `output`, `output[1][0]`, `output['logits']`."""
    return "output" + "".join(f"[{part}]" if part.isdigit() else f"[{part!r}]"
                              for part in path)


def part_name(path: OutputPath) -> str:
    """The tensor name a part of the output goes by in a walk: `output` for the whole,
    `output0`, `output1` for a flat tuple's items (as before structured outputs were taken),
    `output1_0` nested, `output_logits` for a key. Only word characters: names with dots or
    colons mean module paths and ops elsewhere (`records.names`)."""
    if not path:
        return "output"
    joined = "_".join(re.sub(r"\W", "_", part) for part in path)
    return f"output{joined}" if path[0].isdigit() else f"output_{joined}"


__all__ = ["WHOLE", "OutputPath", "parse_output_path", "part_name", "path_text", "python_form"]
