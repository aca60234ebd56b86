"""The lessons a spec asks for beyond the hook walk, composed in one place for walk and report:
the calls in order (with `.grad` around each and torch's errors explained), vector-Jacobian
products, interventions and forward-hook captures. Each part is rendered by its own module; this
one only decides what to show and in which order. No torch here.
"""

from __future__ import annotations

from rich.console import Group, RenderableType

from gradexplain.records.walk import Walk
from gradexplain.render.lessons.calls import runs_markdown, runs_text, worth_showing
from gradexplain.render.lessons.captures import capture_markdown, capture_text
from gradexplain.render.lessons.interventions import intervention_markdown, intervention_text
from gradexplain.render.lessons.vjp import vjp_markdown, vjp_text
from gradexplain.render.markdown import blocks

# Report section titles, in the order they appear.
CALLS = "Calls in order"
VJP = "Vector-Jacobian products"
INTERVENTIONS = "Interventions"
CAPTURES = "Forward-hook captures"


def lessons_text(walk: Walk) -> list[RenderableType]:
    """The lesson parts of the text walk, only those the spec asks for."""
    lessons = walk.lessons
    parts: list[RenderableType] = []
    if worth_showing(walk):
        parts.append(runs_text(walk))
    if lessons.vjp:
        parts.append(vjp_text(lessons.vjp))
    if lessons.interventions:
        parts.append(intervention_text(lessons.interventions))
    if lessons.captures:
        parts.append(capture_text(lessons.captures))
    return [Group(part) for part in parts]


def lessons_sections(walk: Walk, level: int) -> list[tuple[str, str]]:
    """(title, body) of each lesson section a report has for this spec, bodies headed at
    `level` + 1 inside; an empty body means the spec does not ask for it."""
    lessons = walk.lessons
    return [
        (CALLS, runs_markdown(walk, level + 1, headed=False) if worth_showing(walk) else ""),
        (VJP, _unheaded(vjp_markdown(lessons.vjp, level)) if lessons.vjp else ""),
        (INTERVENTIONS, _unheaded(intervention_markdown(lessons.interventions, level))
         if lessons.interventions else ""),
        (CAPTURES, _unheaded(capture_markdown(lessons.captures, level))
         if lessons.captures else ""),
    ]


def lessons_markdown(walk: Walk, level: int) -> str:
    """The lesson sections of `walk --format markdown`, each with its own heading."""
    lessons = walk.lessons
    return blocks(
        runs_markdown(walk, level) if worth_showing(walk) else "",
        vjp_markdown(lessons.vjp, level) if lessons.vjp else "",
        intervention_markdown(lessons.interventions, level) if lessons.interventions else "",
        capture_markdown(lessons.captures, level) if lessons.captures else "",
    )


def _unheaded(markdown: str) -> str:
    """A renderer's section without its own first heading: the report gives the heading."""
    lines = markdown.lstrip("\n").split("\n")
    if lines and lines[0].startswith("#"):
        lines = lines[1:]
    return "\n".join(lines).strip("\n")


__all__ = ["CALLS", "CAPTURES", "INTERVENTIONS", "VJP", "lessons_markdown", "lessons_sections",
           "lessons_text"]
