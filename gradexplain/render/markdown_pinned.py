"""The pinned view as GitHub markdown: the answer table, and the chain rule in LaTeX with every
hook argument at its step. Used by `walk --format markdown`, `diff --format markdown`, the
report and the Python API's notebook view. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gradexplain.records.names import ACCUMULATE, Naming
from gradexplain.records.numbers import fmt
from gradexplain.records.pinned import (
    AnswerRow,
    HookRef,
    Pinned,
    PinnedDerivation,
    PinnedLine,
    PinnedTerm,
    PinnedView,
    compared,
    hidden_steps_text,
    other_graph_text,
)
from gradexplain.records.trace import Mode
from gradexplain.records.walk import Use
from gradexplain.render.latex import formula_latex, tensor_latex
from gradexplain.render.markdown import (
    blocks,
    bullets,
    code,
    escape,
    heading,
    italic,
    math,
    table,
)
from gradexplain.render.marks import check_cell, value_cell

CHAIN_INTRO = ("One item per autograd node, in the order autograd runs them: the gradient "
               "$g$ it starts from, then each share it hands on (its local rule applied to "
               "$g$, the value, the check against a hook-free run). ← lists the hook "
               "arguments whose value is exactly that step.")


def answer_markdown(rows: Sequence[AnswerRow], modes: Sequence[Mode]) -> str:
    """A table: one row per module call and argument, legacy and full side by side."""
    if not rows:
        return ""
    headers = ["module", "argument", *modes] + (["same?"] if len(modes) == 2 else [])
    cells = []
    for row in rows:
        name = code(row.module) + (f" ({escape(row.call)})" if row.call else "")
        for argument, legacy, full, same in (
                ("grad_input", row.legacy_input, row.full_input, row.same_input),
                ("grad_output", row.legacy_output, row.full_output, row.same_output)):
            sides = {"legacy": legacy, "full": full}
            line = [name, code(argument), *(_listed(sides[mode]) for mode in modes)]
            if len(modes) == 2:
                line.append("=" if same else "≠")
            cells.append(line)
            name = ""
    intro = (f"What each module's backward hooks are handed, as derivatives: "
             f"{escape(compared(modes))} (legacy: `register_backward_hook`, full: "
             "`register_full_backward_hook`).")
    return blocks(intro, table(headers, cells))


def _listed(items: tuple[str, ...] | None) -> str:
    return italic("does not fire") if items is None else ", ".join(escape(item)
                                                                  for item in items)


def pinned_markdown(derivations: Sequence[PinnedDerivation], naming: Naming, level: int) -> str:
    """The body of a "Chain rule" section: one sub-section per call, headed at `level`."""
    if not derivations:
        return "No backward or autograd.grad call ran."
    return blocks(CHAIN_INTRO, *(_derivation(item, naming, level) for item in derivations))


def elsewhere_markdown(view: PinnedView) -> str:
    """The arguments of calls no chain rule shows (torch refused them), and of a pass whose
    hooks changed the graph."""
    return blocks(unpinned_markdown("In no chain rule (calls torch refused):", view.elsewhere),
                  *(escape(other_graph_text(mode, count)) for mode, count in view.other_graph))


def _derivation(pinned: PinnedDerivation, naming: Naming, level: int) -> str:
    derivation = pinned.derivation
    call = "backward" if derivation.kind == "backward" else "autograd.grad"
    title = f"Run {fmt(derivation.run)}: {call} of {code(derivation.of)}"
    repeats = (f"Runs {', '.join(map(fmt, derivation.repeats))} compute the same chain."
               if derivation.repeats else "")
    seed = (f"Seed gradient {math('v')} = {value_cell(derivation.seed)}: every {math('g')} "
            "below is a vector-Jacobian product."
            if derivation.seed is not None else "")
    partial = _Partial(derivation.of, derivation.seed is not None, naming)
    items = [_line(number, line, partial) for number, line in enumerate(pinned.lines, start=1)]
    hidden = italic(f"{hidden_steps_text(pinned.hidden)}.") if pinned.hidden else ""
    unpinned = unpinned_markdown("No step of this chain rule (zeros where no gradient flows):",
                                 pinned.unpinned)
    return blocks(heading(level, title), repeats, seed, "\n".join(items), hidden, unpinned)


def unpinned_markdown(title: str, refs: Sequence[HookRef]) -> str:
    """`title`, then a bullet per argument with its label."""
    if not refs:
        return ""
    return blocks(title, bullets([f"{ref.mode}: {_ref(ref)}" for ref in refs]))


@dataclass(frozen=True)
class _Partial:
    """∂of/∂(a tensor) in LaTeX, as a vector-Jacobian product vᵀ·∂of/∂(·) with a seed."""

    of: str
    seeded: bool
    naming: Naming

    def __call__(self, wrt: str, via: Use | None = None) -> str:
        latex = (rf"\frac{{\partial {tensor_latex(self.of, self.naming)}}}"
                 rf"{{\partial {tensor_latex(wrt, self.naming)}}}")
        if via is not None:
            operand = "" if via.operand is None else rf"\,[\text{{operand }} {via.operand}]"
            latex += (rf"\Big|_{{\mathrm{{via}}\ {tensor_latex(via.by, self.naming)}"
                      rf"{operand}}}")
        return rf"v^{{\top}} {latex}" if self.seeded else latex


def _line(number: int, line: PinnedLine, partial: _Partial) -> str:
    made = "leaf" if line.node == ACCUMULATE else "made"
    output = math(tensor_latex(line.output, partial.naming))
    head = f"{number}. {code(line.node.removeprefix('torch::autograd::'))} ({made} {output})"
    if line.others:
        together = ", ".join(partial(item) for item in (line.output, *line.others))
        head += (f": {math(f'g = ({together})')}, the gradients of its "
                 f"{len(line.others) + 1} outputs, taken back together")
    else:
        head += f": {math('g = ' + partial(line.output))} = {value_cell(line.upstream)}"
    if line.shares > 1:
        head += " " + italic(f"(the sum of its {line.shares} shares above)")
    if not line.has_rule:
        head += " " + italic("(no rule for this node type: the generic vector-Jacobian "
                             "product, checked all the same)")
    head += _pins(line.pinned)
    # Nested items must be indented past `10. `, not just `1. `, to stay inside the item.
    indent = " " * len(f"{number}. ")
    return "\n".join([head, *(f"{indent}- {_term(term, partial)}" for term in line.terms)])


def _term(term: PinnedTerm, partial: _Partial) -> str:
    if term.modified_by is not None:
        mark = " " + italic(f"the pass saw it changed by your hook {escape(term.modified_by)}: "
                            "not checked")
    else:
        check = check_cell(term.check)
        mark = f" {check}" if check else ""
    formula = formula_latex(term.local)
    said = (math(formula) if "+=" in term.local
            else math(f"{partial(term.wrt, term.via)} = {formula}"))
    text = f"{said} = {value_cell(term.value)}{mark}{_pins(term.pinned)}"
    if term.total_of is not None:
        text += (f"; {escape(term.total_of)} in all: the sum of its shares above"
                 f"{_pins(term.total_pinned)}")
    return text


def _pins(pinned: Pinned) -> str:
    if not pinned:
        return ""
    parts = [f"{side}: " + ", ".join(_ref(ref) for ref in refs) if side else
             ", ".join(_ref(ref) for ref in refs)
             for side, refs in (("legacy", pinned.legacy), ("full", pinned.full),
                                ("", pinned.both)) if refs]
    return " ← " + "; ".join(parts)


def _ref(ref: HookRef) -> str:
    text = code(ref.text) + (f" ({escape(ref.note)})" if ref.note else "")
    return text + ("" if ref.holds else " **✗ FAILED**")


__all__ = ["answer_markdown", "elsewhere_markdown", "pinned_markdown"]
