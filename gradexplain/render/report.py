"""`gradexplain report`: one self-contained markdown page per spec, and an index of several.

It composes the other markdown renderers (the walk's chain rule, timelines and checks, the
legacy-vs-full diff, the mermaid diagrams) around the spec as written. Everything comes from
the session and the analyses the caller ran on it (`analysis.diff.compare`, the firing orders),
so a saved session gives the same bytes as a fresh run: no timestamps, no paths beyond the
spec's own, no addresses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gradexplain.analysis.order import FiringOrder
from gradexplain.records.diff import HookDiff
from gradexplain.records.distributed_diff import DistributedDiff
from gradexplain.records.paths import module_title
from gradexplain.records.pinned import ANSWER_TITLE, PinnedView
from gradexplain.records.session import Session
from gradexplain.records.walk import Walk
from gradexplain.render.distributed_diff_markdown import (
    SECTION_TITLES,
    distributed_diff_markdown,
)
from gradexplain.render.lessons import lessons_sections
from gradexplain.render.markdown import (
    blocks,
    bold,
    bullets,
    code,
    escape,
    file_link,
    heading,
    table,
)
from gradexplain.render.markdown_diff import diff_markdown, prose
from gradexplain.render.markdown_pinned import (
    answer_markdown,
    elsewhere_markdown,
    pinned_markdown,
)
from gradexplain.render.markdown_walk import (
    checks_markdown,
    forward_values_markdown,
    timeline_markdown,
)
from gradexplain.render.mermaid import MAX_NODES, autograd_mermaid, forward_mermaid
from gradexplain.render.order import order_markdown
from gradexplain.render.warned import group_warnings, modules_text

# Longer specs are shown up to here in the report; the file itself has the rest.
SPEC_LINES = 80

# The sections every report has, in order; lesson sections come only where the spec asks.
SECTIONS = (
    "Summary",
    ANSWER_TITLE,
    "The model",
    "Forward graph",
    "Forward values",
    "Autograd graph",
    "Chain rule",
    "Legacy vs full",
    "Hook timeline",
    "Checks",
    "Environment",
)


def report_markdown(session: Session, diff: HookDiff, view: PinnedView,
                    orders: Sequence[FiringOrder],
                    distributed: DistributedDiff | None = None) -> str:
    """The whole report page of a session, as markdown: `diff` is `compare(session)`, `view`
    its pinned view, `orders` the firing orders to show (`first_firing_orders(session.traces)`).
    `distributed` (`report --ranks N`: `distributed_diff` of the session's spec's ranks) adds
    the section on what the wrapping changed, after "Legacy vs full"."""
    walk = session.walk
    sections = [(title, body) for title, body in _sections(session, diff, view, orders)
                if body]
    if distributed is not None:
        after = next(index for index, (title, _) in enumerate(sections)
                     if title == "Legacy vs full") + 1
        sections.insert(after, distributed_section(distributed))
    parts = [
        heading(1, f"gradexplain report: {escape(walk.name)}"),
        f"> {escape(walk.about)}" if walk.about else "",
        f"{'Model' if walk.whole_names else 'Spec'} {code(walk.spec)}, run with torch "
        f"{code(walk.torch)} by "
        f"{code('gradexplain report')}.",
        bullets([f"[{title}](#{anchor(title)})" for title, _ in sections]),
    ]
    for title, body in sections:
        parts += [heading(2, title), body]
    return blocks(*parts)


def _sections(session: Session, diff: HookDiff, view: PinnedView,
              orders: Sequence[FiringOrder]) -> list[tuple[str, str]]:
    """Every section as (title, body); a lesson the spec does not ask for has an empty body."""
    walk = session.walk
    return [
        ("Summary", blocks(_summary(walk), bullets(
            [f"{code(module_title(module.module))}: {prose(module.verdict)}"
             for module in diff.modules]))),
        (ANSWER_TITLE, answer_markdown(view.answers, [item.mode for item in walk.passes])),
        ("The model", _spec_excerpt(session.spec_text, walk.spec,
                                    "text" if walk.whole_names else "yaml")),
        # A Python model's forward is its own code, with no steps to draw: the autograd graph
        # below is what it recorded.
        ("Forward graph", _diagram(forward_mermaid(session), "the forward")
         if session.forward else ""),
        ("Forward values", forward_values_markdown(session, level=3)),
        ("Autograd graph", blocks(
            "The legacy pass's graph, from the output down to the leaves (gradients flow along "
            "the arrows). Each node a legacy `register_backward_hook` sits on is marked with "
            "its modules.",
            _diagram(autograd_mermaid(session), "the autograd graph"))),
        *lessons_sections(walk, level=2),
        ("Chain rule", blocks(pinned_markdown(view.derivations, walk.naming, level=3),
                              elsewhere_markdown(view))),
        ("Legacy vs full", diff_markdown(diff, level=2)),
        ("Hook timeline", timeline_markdown(walk, level=3, warnings=False)),
        ("Firing order", _firing_orders(orders)),
        ("Checks", checks_markdown(walk, level=3)),
        ("Environment", _environment(session)),
    ]


def distributed_section(diff: DistributedDiff) -> tuple[str, str]:
    """The report's section on a distributed walk: "Under DistributedDataParallel" or "Under
    FSDP2", each rank's single-process walk against its walk under the wrapping."""
    return SECTION_TITLES[diff.wrap], distributed_diff_markdown(diff, level=2)


def _firing_orders(orders: Sequence[FiringOrder]) -> str:
    """Each pass's first call as a numbered timeline with the rule behind each position."""
    return blocks(
        "Every hook call of each pass's first call, numbered, with the rule that puts it "
        "there (rules from torch 2.13's engine, checked against the order observed).",
        *(order_markdown(order, level=3) for order in orders))


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _summary(walk: Walk) -> str:
    failures = walk.failures()
    total = len(walk.checks())
    if not failures:
        return (f"All {total} checks verified: every label below was computed again in a "
                f"hook-free run of the same {'model' if walk.whole_names else 'spec'} and "
                "matched.")
    return bold(f"{len(failures)} of {total} checks FAILED") + escape(
        ": some labels below are wrong or the run differs; see Checks.")


def _spec_excerpt(text: str, path: str, language: str = "yaml") -> str:
    # Its lines as YAML reads them: a file written on Windows (CRLF) or an old Mac (CR) shows
    # no `\x0d` at each line's end, and a byte-order mark is no character of the spec.
    lines = re.split(r"\r\n|\r|\n", text.removeprefix("\ufeff").rstrip("\r\n"))
    shown = "\n".join(lines[:SPEC_LINES])
    longest = max((len(run) for run in re.findall(r"`+", shown)), default=0)
    fence = "`" * max(3, longest + 1)
    more = (f"\n\n{escape(f'... {len(lines) - SPEC_LINES} more lines in ')}{code(path)}"
            if len(lines) > SPEC_LINES else "")
    return f"{fence}{language}\n{shown}\n{fence}{more}"


def _diagram(body: str | None, what: str) -> str:
    if body is None:
        return escape(f"{what.capitalize()} has more than {MAX_NODES} nodes, too many to draw "
                      "readably; the tables below have every one.")
    return f"```mermaid\n{body.rstrip()}\n```"


def _environment(session: Session) -> str:
    walk = session.walk
    rows = []
    for walk_pass in walk.passes:
        for group in group_warnings(walk_pass.warnings):
            rows.append([walk_pass.mode, escape(modules_text(group.modules)), group.phase,
                         code(group.category), escape(group.message), str(group.count)])
    parts = [f"torch {code(walk.torch)}."]
    if rows:
        parts += ["torch's warnings, each once with the modules it came from:",
                  table(["pass", "modules", "phase", "category", "message", "times"], rows)]
    else:
        parts.append("torch gave no warnings.")
    return blocks(*parts)


@dataclass(frozen=True)
class ReportEntry:
    """One report in an index: its file name and the walk it shows."""

    file: str
    walk: Walk


def index_markdown(entries: Sequence[ReportEntry]) -> str:
    rows = []
    for entry in entries:
        failures = entry.walk.failures()
        total = len(entry.walk.checks())
        state = f"all {total} verified" if not failures else f"{len(failures)} of {total} FAILED"
        rows.append([file_link(entry.walk.name, entry.file), code(entry.walk.spec),
                     escape(entry.walk.about or ""), state])
    return blocks(heading(1, "gradexplain reports"),
                  escape(f"{len(entries)} spec(s), one report each."),
                  table(["report", "spec", "about", "checks"], rows))
