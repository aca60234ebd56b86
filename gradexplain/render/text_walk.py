"""`walk --format text`: rich renderables for a person at a terminal (readable at 100 columns).

The renderer returns a renderable; `cli.py` prints it. Colour is the console's business: rich
drops it when output is piped or NO_COLOR is set.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradexplain.label import short_name
from gradexplain.render.fmt import fmt, fmt_value
from gradexplain.render.lessons_render import lessons_text
from gradexplain.render.marks import check_mark
from gradexplain.walk_data import (
    Derivation,
    DerivationLine,
    LabelledEvent,
    PassWalk,
    Walk,
)

PASS_TITLES = {
    "legacy": "legacy pass: register_backward_hook on every module",
    "full": "full pass: register_full_backward_pre_hook + register_full_backward_hook",
}


def walk_text(walk: Walk) -> RenderableType:
    parts: list[RenderableType] = [_header(walk)]
    parts += lessons_text(walk)
    for derivation in walk.derivations:
        parts.append(_derivation(derivation))
    for walk_pass in walk.passes:
        parts.append(_pass(walk_pass))
    parts.append(_verdict(walk))
    return Group(*parts)


def _header(walk: Walk) -> RenderableType:
    title = Text.assemble((walk.name, "bold"), f"  {walk.spec}  (torch {walk.torch})")
    lines: list[RenderableType] = [title]
    if walk.about:
        lines.append(Text(walk.about, style="dim"))
    if walk.interventions:
        lines.append(Text("the two passes below run without the spec's interventions, so "
                          "every label keeps its meaning; each intervention is compared with "
                          "and without it in its own section", style="dim"))
    return Group(*lines, Text(""))


def _derivation(derivation: Derivation) -> RenderableType:
    call = "backward" if derivation.kind == "backward" else "autograd.grad"
    title = f"chain rule of run {derivation.run}: {call} of {derivation.of}"
    lines: list[RenderableType] = []
    if derivation.seed is not None:
        title += f", seed gradient v = {fmt_value(derivation.seed)}"
        lines.append(Text(f"every g below is vᵀ·∂{derivation.of}/∂(·): a vector-Jacobian "
                          "product, v weighing each output element", style="dim italic"))
    lines.insert(0, Text(title, style="bold underline"))
    prefix = "vᵀ·" if derivation.seed is not None else ""
    for line in derivation.lines:
        lines.append(_derivation_line(prefix + "∂" + derivation.of, line))
    lines.append(Text(""))
    return Group(*lines)


def _derivation_line(numerator: str, line: DerivationLine) -> RenderableType:
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(max_width=80)
    table.add_column(no_wrap=True)
    gradient = f"  g = {numerator}/∂{short_name(line.output)} = "
    head = Text.assemble((display_node(line.node), "cyan"), gradient, fmt_value(line.upstream))
    if not line.has_rule:
        head.append("  (no rule for this node type: generic vector-Jacobian product)",
                    style="dim")
    for term in line.terms:
        table.add_row(f"  → {short_name(term.wrt)}:",
                      Text(f"{term.local} = {fmt_value(term.value)}"), check_mark(term.check))
    return Group(head, table)


def _pass(walk_pass: PassWalk) -> RenderableType:
    parts: list[RenderableType] = [Text(PASS_TITLES[walk_pass.mode], style="bold underline")]
    for event in walk_pass.events:
        parts.append(_event(event))
    if walk_pass.grads:
        grads = Table.grid(padding=(0, 1))
        for grad in walk_pass.grads:
            grads.add_row(f"{grad.name}.grad =", fmt_value(grad.value), check_mark(grad.check))
        parts += [Text("final .grad of every leaf", style="bold"), Padding(grads, (0, 0, 0, 2))]
    if walk_pass.warnings:
        parts.append(Text("torch warned (shown once per module):", style="bold yellow"))
        for warning in walk_pass.warnings:
            where = "the model" if warning.module == "" else warning.module or "the run"
            times = f" (x{warning.count})" if warning.count > 1 else ""
            parts.append(Padding(Text(f"{where}, in {warning.phase}: {warning.category}: "
                                      f"{warning.message}{times}"), (0, 0, 0, 2)))
    parts.append(Text(""))
    return Group(*parts)


def _event(event: LabelledEvent) -> RenderableType:
    """`12 backward module2 on SigmoidBackward0`, then one row per argument."""
    head = Text.assemble((f"{event.seq:>3} ", "dim"), (event.hook, "bold"), " ",
                         (event.target if event.target else "<model>", "cyan"))
    if event.node:
        head.append(f" on {display_node(event.node)}")
    rows = Table.grid(padding=(0, 2))
    rows.add_column(no_wrap=True)
    rows.add_column(max_width=40)
    rows.add_column(max_width=40)
    rows.add_column(no_wrap=True)
    for arg in event.args:
        meaning = arg.meaning.text if arg.meaning is not None else (
            "(forward value)" if event.phase == "forward" else "")
        rows.add_row(arg.name, meaning, fmt_value(arg.value), check_mark(arg.check))
    parts: list[RenderableType] = [head]
    if event.why:
        parts.append(Padding(Text(event.why, style="dim italic"), (0, 0, 0, 6)))
    if event.args:
        parts.append(Padding(rows, (0, 0, 0, 6)))
    return Group(*parts)


def display_node(name: str) -> str:
    """`torch::autograd::AccumulateGrad` reads as `AccumulateGrad`."""
    return name.removeprefix("torch::autograd::")


def _verdict(walk: Walk) -> RenderableType:
    total = len(walk.checks())
    failures = walk.failures()
    if not failures:
        return Text(f"all {total} checks verified against a hook-free run of the same spec",
                    style="bold green")
    lines: list[RenderableType] = [
        Text(f"{len(failures)} of {total} checks FAILED: these labels are wrong or the run "
             "differs", style="bold red")]
    for failure in failures:
        mode = f"{failure.mode} " if failure.mode else ""
        if failure.check.expected is None:
            # Nothing to compare with (a refused call, a lesson's identity): the claim says it.
            lines.append(Text(f"  ✗ {mode}{failure.where}: {failure.claim}", style="red"))
            continue
        expected = fmt_value(failure.check.expected)
        lines.append(Text(f"  ✗ {mode}{failure.where}: claimed {failure.claim}; the hook-free "
                          f"run gives {expected} (error {fmt(failure.check.max_abs_err)})",
                          style="red"))
    return Group(*lines)
