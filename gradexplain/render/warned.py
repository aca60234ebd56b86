"""torch's warnings as a reader sees them: each warning once, with the modules it came from.

A pass records a warning once per module and message (`ModuleWarning`); a deep model's legacy
pass gives the same FutureWarning for each of its hundred modules. Here those records are grouped
by what torch said (category, message, phase), and the modules are listed, long runs folded by
the block-number pattern `collapse.shape_key` finds: `0.linear … 49.linear (50)`. The JSON keeps
the records as they are; the text and markdown renderers use this module. No torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import RenderableType
from rich.padding import Padding
from rich.text import Text

from gradexplain.records.trace import Phase
from gradexplain.records.walk import ModuleWarning
from gradexplain.render.collapse import shape_key

# Up to this many modules are named one by one; more are folded by pattern.
LISTED = 6
# A pattern with this many modules or more reads `first … last (count)`.
FOLDED_RUN = 3


@dataclass(frozen=True)
class WarningGroup:
    """One warning as torch gave it, the modules it came from (in the order they first
    warned; None for the run itself), and how often it came in all."""

    category: str
    message: str
    phase: Phase
    modules: tuple[str | None, ...]
    count: int


def group_warnings(warnings: Sequence[ModuleWarning]) -> tuple[WarningGroup, ...]:
    """The records grouped by category, message and phase, in the order each first came."""
    groups: dict[tuple[str, str, Phase], tuple[list[str | None], list[int]]] = {}
    for warning in warnings:
        modules, counts = groups.setdefault(
            (warning.category, warning.message, warning.phase), ([], []))
        if warning.module not in modules:
            modules.append(warning.module)
        counts.append(warning.count)
    return tuple(WarningGroup(category, message, phase, tuple(modules), sum(counts))
                 for (category, message, phase), (modules, counts) in groups.items())


def module_name(module: str | None) -> str:
    """A warning's module as prose: its path, `the model`, or `the run` (no module)."""
    if module is None:
        return "the run"
    return module or "the model"


def modules_text(modules: Sequence[str | None]) -> str:
    """`net.conv1, net.fc and the model`; past LISTED modules, runs of one pattern folded:
    `101 modules: 0.linear … 49.linear (50), 0 … 49 (50) and the model`."""
    names = [module_name(module) for module in modules]
    if len(names) <= LISTED:
        return _and(names)
    patterns: dict[str, list[str]] = {}
    for name in names:
        patterns.setdefault(shape_key(name), []).append(name)
    pieces = [f"{run[0]} … {run[-1]} ({len(run)})" if len(run) >= FOLDED_RUN else _and(run)
              for run in patterns.values()]
    return f"{len(names)} modules: {_and(pieces)}"


def warning_heading(group: WarningGroup) -> str:
    """`FutureWarning in forward, from net.conv1 and net.fc` (with `, 3 times` when torch gave
    it more often than there are modules)."""
    times = f", {group.count} times" if group.count > len(group.modules) else ""
    return f"{group.category} in {group.phase}{times}, from {modules_text(group.modules)}"


def warnings_text(warnings: Sequence[ModuleWarning]) -> list[RenderableType]:
    """The text timeline's warnings: a title, then each warning once under its heading."""
    parts: list[RenderableType] = [
        Text("torch warned (each warning once, with the modules it came from):",
             style="bold yellow")]
    for group in group_warnings(warnings):
        parts += [Padding(Text(warning_heading(group) + ":"), (0, 0, 0, 2)),
                  Padding(Text(group.message, style="dim"), (0, 0, 0, 4))]
    return parts


def _and(names: Sequence[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


__all__ = ["WarningGroup", "group_warnings", "module_name", "modules_text", "warning_heading",
           "warnings_text"]
