"""How a check reads, everywhere a check is shown: ✓, or a failure with its error that no
reader can miss; nothing where nothing was checked. Text (rich) and markdown; no torch here.
Also the markdown cell of a value, which every markdown table (walk, diff) shows the same way."""

from __future__ import annotations

from rich.text import Text

from gradexplain.records.numbers import fmt, fmt_value
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import Check
from gradexplain.render.markdown import bold, code


def check_mark(check: Check | None, not_checked: str | None = None) -> Text:
    if check is None:
        return Text(f"not checked: {not_checked}" if not_checked else "", style="yellow")
    if check.verified:
        return Text("✓", style="green")
    return Text(f"✗ FAILED ({_failure(check)})", style="bold red")


def check_cell(check: Check | None, not_checked: str | None = None) -> str:
    """✓, or a failure no reader can miss; why, where a derivative could not be checked;
    empty where nothing was checked."""
    if check is None:
        return f"not checked: {not_checked}" if not_checked else ""
    if check.verified:
        return "✓"
    return f"✗ {bold('FAILED')} ({_failure(check)})"


def _failure(check: Check) -> str:
    """What failed: the claim itself (it names nothing, or is ambiguous), or its value."""
    return check.why if check.why else f"error {fmt(check.max_abs_err)}"


def value_cell(value: TensorValue | None) -> str:
    """A tensor as fmt_value shows it, in a code span: monospace keeps the digits aligned."""
    return code(fmt_value(value))


__all__ = ["check_cell", "check_mark", "value_cell"]
