"""The pinned view as text, laid out for 100 columns: the answer table (what each module's legacy
and full backward hooks get), then the chain rule with every hook argument at its step.

Lines are laid out here, not by rich (`Text(..., no_wrap=True)`), so that a list wraps between
its items with a hanging indent and a check mark stays on its value's line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.text import Text

from gradexplain.records.numbers import fmt_value
from gradexplain.records.pinned import (
    ANSWER_TITLE,
    AnswerRow,
    HookRef,
    Pinned,
    PinnedDerivation,
    PinnedLine,
    PinnedTerm,
    compared,
    hidden_steps_text,
    other_graph_text,
)
from gradexplain.records.trace import Mode, TensorValue
from gradexplain.render.collapse import shape_key
from gradexplain.render.fit import pack, value_lines
from gradexplain.render.folding import Outline, fold_repeats
from gradexplain.render.marks import check_mark

WIDTH = 100
DERIVATION_NOTE = "g: what a step starts from; →: each share it hands on; ←: the hooks that get it"


def answer_text(rows: Sequence[AnswerRow], modes: Sequence[Mode],
                collapse: bool = True) -> RenderableType:
    """One row per module call and argument: legacy, full and whether they agree. Columns are
    one width for the whole table; a long list wraps between its items, inside its column.
    With `collapse`, a deep model's repeated blocks fold (folding.py)."""
    if not rows:
        return Group()
    names = [row.module + (f" ({row.call})" if row.call else "") for row in rows]
    first = min(max(len(name) for name in names), 28) + 2
    cell = (WIDTH - first - len("grad_output  ") - 3) // len(modes)
    header = f"{'module':<{first}}{'argument':<13}" + "   ".join(
        f"{mode:<{cell}}" for mode in modes)
    table = _AnswerTable(modes, first, cell)
    title = Text(ANSWER_TITLE.lower(), style="bold underline")
    title.append(f": {compared(modes)}", style="bold")
    return Group(title, Text(header.rstrip(), style="dim"),
                 *fold_repeats(list(zip(names, rows, strict=True)), table.row, _answer_outline,
                               "rows", collapse),
                 Text(""))


@dataclass(frozen=True)
class _AnswerTable:
    """The answer's columns: `first` for the module, `cell` for each pass."""

    modes: Sequence[Mode]
    first: int
    cell: int

    def row(self, item: tuple[str, AnswerRow]) -> RenderableType:
        name, row = item
        first, cell, modes = self.first, self.cell, self.modes
        lines: list[Text] = []
        if len(name) > first - 2:
            lines.append(Text(name, style="cyan"))
            name = ""
        for argument, legacy, full, same in (
                ("grad_input", row.legacy_input, row.full_input, row.same_input),
                ("grad_output", row.legacy_output, row.full_output, row.same_output)):
            cells = {"legacy": _wrapped(legacy, cell), "full": _wrapped(full, cell)}
            height = max(len(cells[mode]) for mode in modes)
            for number in range(height):
                text = Text(f"{name:<{first}}" if number == 0 else " " * first, style="cyan")
                text.append(f"{argument:<13}" if number == 0 else " " * 13)
                for position, mode in enumerate(modes):
                    part = cells[mode][number] if number < len(cells[mode]) else ""
                    text.append(f"{part:<{cell}}")
                    if position == 0 and len(modes) == 2:
                        mark = ("=" if same else "≠") if number == 0 else " "
                        text.append(f" {mark} ", style="green" if same else "yellow")
                lines.append(_trimmed(text))
                name = ""
        return Group(*lines)


def _answer_outline(item: tuple[str, AnswerRow]) -> Outline:
    name, row = item
    text = " ".join(str(part) for part in (name, row.legacy_input, row.full_input,
                                           row.legacy_output, row.full_output, row.same_input,
                                           row.same_output))
    return Outline(text, shape_key(text), 0)


def _wrapped(items: tuple[str, ...] | None, width: int) -> list[str]:
    """Items joined by ", ", wrapped between them to `width` (an item longer than that gets a
    line of its own)."""
    if items is None:
        return ["(does not fire)"]
    return pack([f"{item}," for item in items[:-1]] + list(items[-1:]), width)


def _trimmed(text: Text) -> Text:
    text.rstrip()
    return text


def pinned_text(pinned: PinnedDerivation, collapse: bool = True) -> RenderableType:
    """One call's chain rule, each step with the hook arguments pinned to it; with `collapse`,
    a deep model's repeated steps fold (folding.py)."""
    derivation = pinned.derivation
    call = "backward" if derivation.kind == "backward" else "autograd.grad"
    title = f"chain rule of run {derivation.run}: {call} of {derivation.of}"
    if derivation.repeats:
        title += f" (runs {', '.join(map(str, derivation.repeats))} compute the same)"
    lines: list[Text] = [Text(title, style="bold underline"),
                         Text(DERIVATION_NOTE, style="dim")]
    if derivation.seed is not None:
        seed = Text("seed gradient v = ", style="dim")
        _value(seed, derivation.seed, None, "    ")
        lines += [*_split(seed), Text(f"  every g below is vᵀ·∂{derivation.of}/∂(·), a "
                                      "vector-Jacobian product", style="dim")]
    steps = fold_repeats(pinned.lines, lambda line: Group(*_line(line)), _line_outline,
                         "steps", collapse)
    hidden = [Text(f"  ({hidden_steps_text(pinned.hidden)})", style="dim")
              ] if pinned.hidden else []
    notes = unpinned_lines("no step of this chain rule (zeros where no gradient flows):",
                           pinned.unpinned)
    return Group(*lines, *steps, *hidden, *notes, Text(""))


def _line_outline(line: PinnedLine) -> Outline:
    """A step as the folding sees it: its words and pins (block numbers masked), the shapes
    of its values; never folded when a check or a pinned argument's check failed."""
    pins = [line.pinned, *(term.pinned for term in line.terms),
            *(term.total_pinned for term in line.terms)]
    refs = [ref for pinned in pins for ref in (*pinned.legacy, *pinned.full, *pinned.both)]
    rows = [f"{line.node} {line.gradient} {line.has_rule} {line.shares}",
            *(f"{term.derivative} {term.local} {term.modified_by}" for term in line.terms),
            *(f"{ref.mode} {_ref(ref)}" for ref in refs)]
    text = "\n".join(rows)
    checks = [term.check for term in line.terms if term.check is not None]
    failed = not all(check.verified for check in checks) or not all(ref.holds for ref in refs)
    values = (line.upstream, *(term.value for term in line.terms))
    shape = None if failed else (shape_key(text), tuple(
        None if value is None else value.shape for value in values))
    return Outline(text, shape, len(checks))


def unpinned_lines(title: str, refs: Sequence[HookRef]) -> list[Text]:
    """`title`, then each argument with its label, wrapped under it."""
    if not refs:
        return []
    found = [Text(title, style="bold")]
    for ref in refs:
        words = f"{ref.mode}: {_ref(ref)}".split(" ")
        found += _lines(pack(words, WIDTH - 4, "  "), "  ", "dim")
    return found


def _line(line: PinnedLine) -> list[Text]:
    name = line.node.removeprefix("torch::autograd::")
    if line.others:
        # Its outputs' gradients together: each is shown where its shares were made.
        together = ", ".join((line.gradient, *line.other_gradients))
        words = (f"{name}  g = ({together}): the gradients of its {len(line.others) + 1} "
                 "outputs, taken back together").split(" ")
        found = [Text(text) for text in pack(words, WIDTH, "    ")]
        found[0].stylize("cyan", 0, len(name))
    else:
        head = Text.assemble((name, "cyan"), f"  g = {line.gradient} = ")
        _value(head, line.upstream, None, "    ")
        found = _split(head)
    if line.shares > 1:
        found.append(Text(f"    (g adds up the {line.shares} shares of "
                          f"{line.gradient.split('/∂', 1)[-1]} above)", style="dim"))
    if not line.has_rule:
        found.append(Text("    (no rule for this node type: a generic vector-Jacobian product)",
                          style="dim"))
    found = _with_pins(found, line.pinned, "    ")
    for term in line.terms:
        found += _term(term)
    return found


def _term(term: PinnedTerm) -> list[Text]:
    # A leaf's step reads `p.grad += g`: its derivative is already the formula's left side.
    said = (term.local if term.local.startswith(term.derivative)
            else f"{term.derivative} = {term.local}")
    text = Text(f"  → {said} = ")
    if term.modified_by is not None:
        mark = Text(f"the pass saw it changed by your hook {term.modified_by}: not checked",
                    style="magenta")
    else:
        mark = check_mark(term.check)
    _value(text, term.value, mark, "      ")
    found = _with_pins(_split(text), term.pinned, "      ")
    if term.total_of is not None:
        total = [Text(f"    = {term.total_of} in all: the sum of its shares above",
                      style="dim")]
        found += _with_pins(total, term.total_pinned, "      ")
    return found


def _with_pins(lines: list[Text], pinned: Pinned, indent: str) -> list[Text]:
    """`lines` and the arguments pinned to them: after the last line when they fit there,
    else on lines of their own below it."""
    below = _pins(pinned, indent)
    if len(below) == 1 and len(lines[-1].plain) + len(below[0].plain) - len(indent) + 2 <= WIDTH:
        lines[-1].append("  ")
        lines[-1].append_text(Text(below[0].plain[len(indent):], style=below[0].style))
        return lines
    return lines + below


def _value(text: Text, value: TensorValue | None, mark: Text | None, indent: str) -> None:
    """`value` (and its mark) after `text` when they fit there, else on lines of their own
    below it, a matrix one row per line (fit.value_lines), the mark on the value's last line."""
    one_line = fmt_value(value)
    width = len(one_line) + (len(mark.plain) + 1 if mark is not None else 0)
    if len(text.plain.splitlines()[-1]) + width <= WIDTH:
        text.append(one_line)
    else:
        room = WIDTH - len(indent) - (len(mark.plain) + 1 if mark is not None else 0)
        for line in value_lines(value, room):
            text.append("\n" + indent + line)
    if mark is not None:
        text.append(" ")
        text.append_text(mark)


def _split(text: Text) -> list[Text]:
    return [_trimmed(part) for part in text.split("\n")]


def _pins(pinned: Pinned, indent: str) -> list[Text]:
    """`← legacy: a, b; full: c; tensor hook on t`, wrapped between arguments."""
    if not pinned:
        return []
    words: list[str] = []
    for side, refs in (("legacy: ", pinned.legacy), ("full: ", pinned.full), ("", pinned.both)):
        if not refs:
            continue
        texts = [_ref(ref) for ref in refs]
        texts = [f"{item}," for item in texts[:-1]] + [f"{texts[-1]};"]
        words += [side + texts[0], *texts[1:]]
    words[-1] = words[-1].removesuffix(";")
    filled = pack(words, WIDTH - len(indent) - 2, "  ")
    return _lines([("← " if number == 0 else "  ") + line for number, line in enumerate(filled)],
                  indent, "green")


def _ref(ref: HookRef) -> str:
    text = ref.text + (f" ({ref.note})" if ref.note else "")
    return text + ("" if ref.holds else " ✗ FAILED")


def _lines(lines: Sequence[str], indent: str, style: str) -> list[Text]:
    return [Text(indent + line, style=style) for line in lines]


def other_graph_lines(counts: Sequence[tuple[Mode, int]]) -> list[Text]:
    """One line per pass whose hooks changed the graph: its arguments are on that graph."""
    return [Text(other_graph_text(mode, count), style="yellow") for mode, count in counts]


__all__ = ["answer_text", "other_graph_lines", "pinned_text", "unpinned_lines"]
