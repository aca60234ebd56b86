"""The lessons a spec asks for beyond the hook walk, composed in one place for walk and report:
the calls in order (with `.grad` around each and torch's errors explained), vector-Jacobian
products, interventions and the activations forward hooks stored. Each is rendered by its own
module (named as the lesson's records and capture modules); `LESSONS`, one row a lesson, decides
what to show and in which order. No torch here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Group, RenderableType

from gradexplain.records.walk import Walk
from gradexplain.render.lessons.activations import activations_markdown, activations_text
from gradexplain.render.lessons.calls import runs_markdown, runs_text, worth_showing
from gradexplain.render.lessons.interventions import intervention_markdown, intervention_text
from gradexplain.render.lessons.vjp import vjp_markdown, vjp_text
from gradexplain.render.markdown import blocks

# Report section titles, in the order they appear.
CALLS = "Calls in order"
VJP = "Vector-Jacobian products"
INTERVENTIONS = "Interventions"
CAPTURES = "Forward-hook captures"


@dataclass(frozen=True)
class LessonView:
    """How one lesson shows: its report section title, whether this walk has it, and its text
    and markdown (a section headed at the given level)."""

    title: str
    shown: Callable[[Walk], bool]
    text: Callable[[Walk], RenderableType]
    markdown: Callable[[Walk, int], str]


# Every lesson, in the order walk and report show them: a new lesson is one line here.
LESSONS = (
    LessonView(CALLS, worth_showing, runs_text, runs_markdown),
    LessonView(VJP, lambda walk: bool(walk.lessons.vjp),
               lambda walk: vjp_text(walk.lessons.vjp),
               lambda walk, level: vjp_markdown(walk.lessons.vjp, level, walk.naming)),
    LessonView(INTERVENTIONS, lambda walk: bool(walk.lessons.interventions),
               lambda walk: intervention_text(walk.lessons.interventions),
               lambda walk, level: intervention_markdown(walk.lessons.interventions, level)),
    LessonView(CAPTURES, lambda walk: bool(walk.lessons.captures),
               lambda walk: activations_text(walk.lessons.captures),
               lambda walk, level: activations_markdown(walk.lessons.captures, level)),
)


def lessons_text(walk: Walk) -> list[RenderableType]:
    """The lesson parts of the text walk, only those the spec asks for."""
    return [Group(lesson.text(walk)) for lesson in LESSONS if lesson.shown(walk)]


def lessons_sections(walk: Walk, level: int) -> list[tuple[str, str]]:
    """(title, body) of each lesson section a report has for this spec, bodies headed at
    `level` + 1 inside; an empty body means the spec does not ask for it."""
    return [(lesson.title, _unheaded(lesson.markdown(walk, level)) if lesson.shown(walk) else "")
            for lesson in LESSONS]


def lessons_markdown(walk: Walk, level: int) -> str:
    """The lesson sections of `walk --format markdown`, each with its own heading."""
    return blocks(*(lesson.markdown(walk, level) for lesson in LESSONS if lesson.shown(walk)))


def _unheaded(markdown: str) -> str:
    """A renderer's section without its own first heading: the report gives the heading."""
    lines = markdown.lstrip("\n").split("\n")
    if lines and lines[0].startswith("#"):
        lines = lines[1:]
    return "\n".join(lines).strip("\n")


__all__ = ["CALLS", "CAPTURES", "INTERVENTIONS", "LESSONS", "VJP", "LessonView",
           "lessons_markdown", "lessons_sections", "lessons_text"]
