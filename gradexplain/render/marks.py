"""How a check reads, everywhere a check is shown: ✓, or a failure with its error that no
reader can miss; nothing where nothing was checked. Text (rich) and markdown; no torch here."""

from __future__ import annotations

from rich.text import Text

from gradexplain.records.numbers import fmt
from gradexplain.records.walk import Check
from gradexplain.render.markdown import bold


def check_mark(check: Check | None) -> Text:
    if check is None:
        return Text("")
    if check.verified:
        return Text("✓", style="green")
    return Text(f"✗ FAILED (error {fmt(check.max_abs_err)})", style="bold red")


def check_cell(check: Check | None) -> str:
    """✓, or a failure no reader can miss; empty where nothing was checked."""
    if check is None:
        return ""
    if check.verified:
        return "✓"
    return f"✗ {bold('FAILED')} (error {fmt(check.max_abs_err)})"


__all__ = ["check_cell", "check_mark"]
