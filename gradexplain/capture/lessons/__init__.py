"""What a spec asks beyond the hook walk, each lesson one module run on its own fresh builds.

This is where lessons are registered: `lessons_for` asks each whether the spec wants it, and
imports a lesson's module only then. A lesson's results are `records/lessons/<name>.py`, its
rendering `render/lessons/<name>.py`.
"""

from __future__ import annotations

from gradexplain.language.model import ModelSpec
from gradexplain.records.lessons.activations import ActivationLesson
from gradexplain.records.lessons.interventions import InterventionLesson
from gradexplain.records.lessons.vjp import VjpLesson
from gradexplain.records.walk import Lessons


def lessons_for(spec: ModelSpec) -> Lessons:
    """The lessons the spec asks for, each computed on its own fresh builds; each lesson's
    module is imported only when the spec asks for that lesson."""
    vjp: tuple[VjpLesson, ...] = ()
    if any(item.gradient is not None for item in spec.backwards) or any(
            call.grad_outputs is not None for call in spec.grads):
        from gradexplain.capture.lessons.vjp import vjp_lessons

        vjp = vjp_lessons(spec, inputs_first=True)
    interventions: tuple[InterventionLesson, ...] = ()
    if spec.interventions:
        from gradexplain.capture.lessons.interventions import intervention_lessons

        interventions = intervention_lessons(spec)
    captures: tuple[ActivationLesson, ...] = ()
    if spec.captures:
        from gradexplain.capture.lessons.activations import activation_lessons

        captures = activation_lessons(spec)
    return Lessons(vjp, interventions, captures)


__all__ = ["lessons_for"]
