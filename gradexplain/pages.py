"""Whole pages composed from the stages: a session's analyses (analysis/) handed to the
renderers (render/), for the command line and the Python API alike. No torch here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gradexplain.errors import UsageError

if TYPE_CHECKING:
    from gradexplain.records.distributed_diff import DistributedDiff
    from gradexplain.records.session import Session


INDEX = "index.md"  # report --all's index of the reports


def report_page(session: Session, distributed: DistributedDiff | None = None) -> str:
    """The markdown report of a session: its diff, pinned view and firing orders computed,
    then rendered; with `distributed` (`report --ranks N`), its section on what the wrapping
    changed too."""
    from gradexplain.analysis.diff import compare
    from gradexplain.analysis.order import first_firing_orders
    from gradexplain.analysis.pinned import pinned_view
    from gradexplain.render.report import report_markdown

    diff = compare(session)
    return report_markdown(session, diff, pinned_view(session.walk, diff),
                           first_firing_orders(session.traces), distributed)


def spec_files(folder: Path) -> list[Path]:
    """The specs `report --all FOLDER` reports: its *.yaml, then its *.yml files, by name."""
    if not folder.is_dir():
        raise UsageError(f"--all {folder}: not a folder")
    specs = sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))
    if not specs:
        raise UsageError(f"--all {folder}: no *.yaml specs in it")
    return specs


def report_names(specs: list[Path]) -> dict[Path, str]:
    """The report file each spec gets in `report --all`'s folder: its stem + `.md`. Two specs
    that would get one name (`a.yaml`, `a.yml`), or a spec named like the index
    (`index.yaml`), are refused before anything runs: every report must survive."""
    names: dict[Path, str] = {}
    taken: dict[str, Path] = {}
    for path in specs:
        name = f"{path.stem}.md"
        if name == INDEX:
            raise UsageError(f"--all: {path} would be reported to {INDEX}, the index's name; "
                             "rename the spec")
        if name in taken:
            raise UsageError(f"--all: {taken[name]} and {path} would both be reported to "
                             f"{name}; rename one of them")
        taken[name] = path
        names[path] = name
    return names


__all__ = ["INDEX", "report_names", "report_page", "spec_files"]
