"""`walk --format markdown` and the walk sections of `report`: the chain rule, each pass's hook
timeline with every argument labelled and checked, the final `.grad`s, torch's warnings, the
checks; and the forward values of a session. GitHub markdown as a string, never printed.

Mirrors render/text_walk.py section for section; numbers go through fmt, formulas through
render/latex.py, markdown syntax through render/markdown.py. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence

from gradexplain.analysis.pinned import pinned_view
from gradexplain.records.check import summaries_not_checked_text
from gradexplain.records.names import canonical_name
from gradexplain.records.numbers import fmt, fmt_shape
from gradexplain.records.pinned import ANSWER_TITLE, PinnedView
from gradexplain.records.refusals import refusal_text
from gradexplain.records.session import Session
from gradexplain.records.walk import (
    Check,
    Failure,
    LabelledArg,
    LabelledEvent,
    PassWalk,
    Walk,
)
from gradexplain.render.lessons import lessons_markdown
from gradexplain.render.markdown import (
    blocks,
    bold,
    bullets,
    code,
    escape,
    heading,
    italic,
    math,
    table,
)
from gradexplain.render.markdown_pinned import (
    answer_markdown,
    elsewhere_markdown,
    pinned_markdown,
)
from gradexplain.render.marks import check_cell, value_cell
from gradexplain.render.user_hooks import user_hook_line, user_mark
from gradexplain.render.warned import group_warnings, modules_text

PASS_HOOKS = {
    "legacy": "`register_backward_hook` on every module",
    "full": "`register_full_backward_pre_hook` and `register_full_backward_hook` on every module",
}
TIMELINE_HEADERS = ("#", "hook", "target", "node", "argument", "derivative", "value", "check")


def walk_markdown(walk: Walk, view: PinnedView | None = None, level: int = 2) -> str:
    """The whole walk: a header paragraph, then the sections "What each module's hooks get"
    (when `view` has the answer), "Chain rule" (every hook argument at its step), the lessons,
    "Hook timeline: legacy pass", "Hook timeline: full pass" and "Checks", headed at `level`.
    `view` defaults to the walk's own, without the answer (which needs the session's diff)."""
    view = view or pinned_view(walk, None)
    modes = [item.mode for item in walk.passes]
    answer = answer_markdown(view.answers, modes)
    return blocks(
        _header(walk),
        heading(level, ANSWER_TITLE) if answer else "",
        answer,
        heading(level, "Chain rule"),
        pinned_markdown(view.derivations, walk.naming, level + 1),
        elsewhere_markdown(view),
        lessons_markdown(walk, level),
        timeline_markdown(walk, level),
        heading(level, "Checks"),
        checks_markdown(walk, level + 1),
    )


def _header(walk: Walk) -> str:
    parts = [f"{bold(escape(walk.name))} · {code(walk.spec)} · torch {escape(walk.torch)}"]
    if walk.about:
        parts.append(escape(walk.about, block=True))
    if walk.interventions:
        parts.append(alert("NOTE", "The two hook passes run without the spec's "
                                    "interventions, so every label keeps its meaning; each "
                                    "intervention is compared with and without it in its own "
                                    "section."))
    failures = walk.failures()
    if failures:
        parts.append(alert("CAUTION", f"{bold(_failed_count(walk, failures))}: these labels "
                                       "are wrong or the run differs; every failure is listed "
                                       "under Checks."))
    return blocks(*parts)


def alert(kind: str, body: str) -> str:
    """A GitHub alert box (`> [!CAUTION]`); elsewhere it reads as a plain block quote."""
    return "\n".join([f"> [!{kind}]", *(f"> {line}" if line else ">"
                                         for line in body.split("\n"))])


def display_node(name: str) -> str:
    """`torch::autograd::AccumulateGrad` reads as `AccumulateGrad`."""
    return name.removeprefix("torch::autograd::")


# --- one pass --------------------------------------------------------------------------------


def timeline_markdown(walk: Walk, level: int = 2, warnings: bool = True) -> str:
    """Every pass's section (see pass_markdown), each headed at `level`; the report lists
    torch's warnings in a section of their own (`warnings=False`)."""
    if not walk.passes:
        return "No pass was selected."
    return blocks(*(pass_markdown(walk_pass, level, warnings) for walk_pass in walk.passes))


def pass_markdown(walk_pass: PassWalk, level: int = 2, warnings: bool = True) -> str:
    """"Hook timeline: <mode> pass" headed at `level`: one table row per hook argument, where
    the legacy hooks sit, then the final `.grad`s and torch's warnings a level below."""
    mode = walk_pass.mode
    intro = (f"{PASS_HOOKS[mode]}; both passes also hook every module's forward, every named "
             "tensor, every leaf and every autograd node. One row per hook argument, in the "
             "order the hooks ran.")
    parts = [heading(level, f"Hook timeline: {mode} pass"), intro]
    if walk_pass.graph_changed:
        parts.append(alert("NOTE", escape(walk_pass.graph_changed)))
    if walk_pass.user_hooks:
        parts.append(bullets([escape(user_hook_line(hook, mode))
                              for hook in walk_pass.user_hooks]))
    if walk_pass.refusals:
        parts += ["torch refuses full backward hooks where a tensor they would wrap is changed "
                  "in place: this pass leaves them off these modules and hooks everything else.",
                  bullets([escape(refusal_text(item)) for item in walk_pass.refusals])]
    if walk_pass.failed_runs:
        parts.append(bullets([f"✗ {bold('FAILED')}: {escape(failure.sentence())}"
                              for failure in walk_pass.failed_runs]))
    if walk_pass.events:
        parts.append(timeline_table(walk_pass.events))
    else:
        parts.append("No hook events (all filtered out).")
    whys = [f"{code('#' + fmt(event.seq))} {_target(event)}: {escape(event.why)}"
            for event in walk_pass.events if event.why]
    if whys:
        parts += [f"Where each legacy hook sits ({fmt(len(whys))} module backward hooks):",
                  bullets(whys)]
    if walk_pass.grads:
        rows = [[code(grad.name), value_cell(grad.value),
                 italic(f"changed by your hook {escape(grad.modified_by)}: not checked")
                 if grad.modified_by is not None else check_cell(grad.check)]
                for grad in walk_pass.grads]
        parts += [heading(level + 1, f"Final .grad: {mode} pass"),
                  "The `.grad` of every leaf after the pass.",
                  table(["leaf", ".grad", "check"], rows)]
    if warnings and walk_pass.warnings:
        rows = [[escape(modules_text(group.modules)), group.phase, code(group.category),
                 escape(group.message), fmt(group.count)]
                for group in group_warnings(walk_pass.warnings)]
        parts += [heading(level + 1, f"Torch's warnings: {mode} pass"),
                  "Each warning once, with the modules it came from and how often it came.",
                  table(["modules", "phase", "category", "message", "count"], rows,
                        (None, None, None, None, "right"))]
    return blocks(*parts)


def timeline_table(events: Sequence[LabelledEvent]) -> str:
    """One row per hook argument; an event's hook, target and node only on its first row, and
    an event without arguments still gets a row."""
    rows: list[list[str]] = []
    for event in events:
        first = [fmt(event.seq), code(event.hook), _target(event),
                 code(display_node(event.node)) if event.node else ""]
        if event.user is not None:
            first[1] += " " + italic(escape(user_mark(event.user)))
        if not event.args:
            rows.append(first + [italic("(no arguments)"), "", "", ""])
        for index, arg in enumerate(event.args):
            lead = first if index == 0 else ["", "", "", ""]
            rows.append(lead + _arg_cells(event, arg))
        for arg in event.returned or ():
            note = "what your hook returned" + (" (changed)" if event.changed else "")
            rows.append(["", "", "", "", code("→ " + arg.name), italic(note),
                         value_cell(arg.value), ""])
    return table(TIMELINE_HEADERS, rows, ("right", None, None, None, None, None, None, None))


def _arg_cells(event: LabelledEvent, arg: LabelledArg) -> list[str]:
    if arg.meaning is not None:
        derivative = math(arg.meaning.latex)
        if arg.meaning.modified_by is not None:
            derivative += " " + italic(escape(f"(changed by your hook {arg.meaning.modified_by}: "
                                              "not checked)"))
        elif arg.meaning.modified:
            derivative += " " + italic("(modified by an intervention)")
    else:
        derivative = "forward value" if event.phase == "forward" else ""
    return [code(arg.name), derivative, value_cell(arg.value),
            check_cell(arg.check, arg.not_checked)]


def _target(event: LabelledEvent) -> str:
    return code(event.target) if event.target else italic("the model")


# --- checks ----------------------------------------------------------------------------------


def checks_markdown(walk: Walk, level: int = 3) -> str:
    """The body of a "Checks" section: how many checks were verified, per kind and pass, and
    every failure, loudly, under a "Failed checks" heading at `level`."""
    counted = _tallies(walk)
    verified = sum(good for _, good, _ in counted)
    total = sum(count for _, _, count in counted)
    rows = [[what, fmt(good), fmt(count), fmt(count - good)] for what, good, count in counted]
    rows.append([bold("all"), bold(fmt(verified)), bold(fmt(total)), bold(fmt(total - verified))])
    intro = ("Every label, chain-rule term and final `.grad` above is computed again in a "
             "hook-free run of an identical build (`torch.autograd.grad` of the same output with "
             "the same seed gradient) and compared.")
    parts = [intro,
             table(["checked", "verified", "of", "failed"], rows,
                   (None, "right", "right", "right"))]
    failures = walk.failures()
    if failures:
        lines = [bold(_failed_count(walk, failures)) +
                 ": these labels are wrong or the run differs.", "",
                 *(f"- {failure_item(failure)}" for failure in failures)]
        parts += [heading(level, "Failed checks"), alert("CAUTION", "\n".join(lines))]
    else:
        parts.append(f"✓ All {fmt(total)} checks verified against a hook-free run of the same "
                     "spec.")
    unchecked = walk.summaries_not_checked()
    if unchecked:
        parts.append(alert("WARNING", escape(summaries_not_checked_text(unchecked)) + "."))
    return blocks(*parts)


def _tallies(walk: Walk) -> list[tuple[str, int, int]]:
    """(what, verified, checked) per pass and kind, then for the chain rule."""
    groups: list[tuple[str, list[Check | None]]] = []
    for walk_pass in walk.passes:
        groups.append((f"{walk_pass.mode} pass: hook arguments",
                       [arg.check for event in walk_pass.events for arg in event.args]))
        groups.append((f"{walk_pass.mode} pass: final .grad",
                       [grad.check for grad in walk_pass.grads]))
    groups.append(("chain rule terms", [term.check for derivation in walk.derivations
                                        for line in derivation.lines for term in line.terms]))
    # The rest of what `Walk.checks` counts, so that the table adds up to the walk's total
    # (rows only where there are such checks).
    for what, items in (("backward calls: .grad before + added", walk.run_checks()),
                        ("lessons", walk.lesson_checks())):
        found = [item.check for item in items]
        if found:
            groups.append((what, list(found)))
    counted = []
    for what, checks in groups:
        done = [check for check in checks if check is not None]
        counted.append((what, sum(1 for check in done if check.verified), len(done)))
    return counted


def _failed_count(walk: Walk, failures: Sequence[Failure]) -> str:
    total = sum(count for _, _, count in _tallies(walk))
    return f"✗ {fmt(len(failures))} of {fmt(total)} checks FAILED"


def failure_item(failure: Failure, reference: str = "the hook-free run") -> str:
    """A failed check as a list item: where, the claim, what `reference` gives instead."""
    mode = f"{failure.mode} pass, " if failure.mode else ""
    expected = value_cell(failure.check.expected)
    return (f"✗ {mode}{code(failure.where)}: claimed {escape(failure.claim)}; {reference} "
            f"gives {expected} (error {fmt(failure.check.max_abs_err)})")


# --- forward values --------------------------------------------------------------------------


def forward_values_markdown(session: Session, level: int = 3) -> str:
    """The body of a "Forward values" section: the named tensors of the forward, in the order
    the run met them (legacy pass). The caller titles the section; `level` is for headings
    inside it, of which there are none yet."""
    trace = session.trace("legacy") or (session.traces[0] if session.traces else None)
    if trace is None:
        return "No forward was recorded."
    rows: list[list[str]] = []
    for record in trace.tensors:
        name = canonical_name(record.names)
        if record.value is None or name is None:
            continue
        others = ", ".join(code(other) for other in record.names if other != name)
        rows.append([code(name), others, code(fmt_shape(record.shape)),
                     "yes" if record.requires_grad else "no", "yes" if record.is_leaf else "no",
                     value_cell(record.value)])
    if not rows:
        return "The forward recorded no named tensor values."
    intro = (f"The named tensors of the forward ({trace.mode} pass), in the order the run met "
             "them; other names are the same tensor as a module argument or output.")
    return blocks(intro, table(
        ["tensor", "other names", "shape", "requires grad", "leaf", "value"], rows))


__all__ = ["alert", "check_cell", "checks_markdown", "display_node", "failure_item",
           "forward_values_markdown", "pass_markdown", "timeline_markdown", "timeline_table",
           "walk_markdown"]
