"""What a dependency says, asked of the dependency itself.

A dependency's words are never written into a test: a new release of torch, PyYAML or Python may
reword them. Where gradexplain passes a message on, `raised_by` makes the dependency say it: the
test runs the same operation in plain torch (or PyYAML, or Python) and looks for the first line
of what that raised in gradexplain's output.

Nothing here imports gradexplain or torch.
"""

from __future__ import annotations

from collections.abc import Callable


def raised_by(action: Callable[[], object]) -> str:
    """The first line of the message that `action`, run in the dependency itself, raises: the
    oracle for a message gradexplain passes on (what gradexplain's `first_line` keeps)."""
    try:
        action()
    except Exception as error:
        lines = str(error).strip().splitlines()
        assert lines, f"the oracle raised {type(error).__name__} without a message"
        return lines[0]
    raise AssertionError("the oracle did not raise: the test's premise no longer holds")
