"""Where full's derivatives sit in legacy's hook arguments (`Alignment`), and the verdict in
plain words that `analysis/diff.py` writes from it. No torch here.

The alignment is the one fact a call's rows and its verdict both read: a row is `=` exactly when
the alignment puts full's argument at the same position in legacy's, and the verdict says
"grad_input[k] is full's ..." or "not ..." from the same positions. (Before, the rows compared
derivatives and the verdict compared names: a Conv2d's row said `=` while its verdict said
"not ∂score/∂image".)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gradexplain.records.diff import CallDiff
from gradexplain.records.names import Naming, op_title
from gradexplain.records.paths import module_title
from gradexplain.records.refusals import refusal_text
from gradexplain.records.trace import ModuleCall, PassTrace, Refusal
from gradexplain.records.walk import LabelledArg, Meaning


def same(left: LabelledArg | None, right: LabelledArg | None,
         changes_too: bool = True) -> bool:
    """The same derivative (of, wrt, layout, share), or None on both sides; with
    `changes_too`, also changed by the same user's hook, or by none: a value a user's hook
    changed in one pass (it runs in that pass only) is not the other pass's."""
    if left is None or right is None:
        return False
    if left.value is None or right.value is None:
        return left.value is None and right.value is None
    if left.meaning is None or right.meaning is None:
        return False
    claims = [(meaning.of, meaning.wrt, meaning.layout, meaning.partial,
               meaning.modified_by if changes_too else None)
              for meaning in (left.meaning, right.meaning)]
    return claims[0] == claims[1]


@dataclass(frozen=True)
class Alignment:
    """One kind of argument (`grad_input` or `grad_output`) in both hooks, in hook order, and
    `found[j]`: the position in `legacy` that holds full's `j`-th derivative (its own position
    when that one does), or None when legacy has it nowhere."""

    legacy: tuple[LabelledArg | None, ...]
    full: tuple[LabelledArg | None, ...]
    found: tuple[int | None, ...]

    def same_at(self, position: int) -> bool:
        """The `=` of a row: legacy's argument at `position` is full's argument there."""
        return position < len(self.found) and self.found[position] == position

    def wanted(self) -> list[int]:
        """full's positions that hold a derivative (not None)."""
        return [index for index, arg in enumerate(self.full)
                if arg is not None and arg.value is not None]

    def taken(self) -> set[int]:
        """legacy's positions that hold one of full's derivatives."""
        return {found for found in (self.found[index] for index in self.wanted())
                if found is not None}

    def full_at(self, position: int) -> int | None:
        """Which of full's positions legacy's `position` holds, if any (a row's note)."""
        for index in self.wanted():
            if self.found[index] == position:
                return index
        return None

    def elsewhere(self, kind: str, position: int) -> str:
        """`; full's grad_input[0] is legacy's grad_input[1]`: a row's part of what the verdict
        says, where a derivative both hooks give sits in another row ("" when in this one)."""
        words = []
        # A None pairs with any None (two unrelated absences): only derivatives are placed.
        found = self.found[position] if position in self.wanted() else None
        if found is not None and found != position:
            words.append(f"full's {kind}[{position}] is legacy's {kind}[{found}]")
        held = self.full_at(position)
        if held is not None and held != position:
            words.append(f"legacy's {kind}[{position}] is full's {kind}[{held}]")
        return "".join(f"; {word}" for word in words)


def align(legacy: Sequence[LabelledArg | None], full: Sequence[LabelledArg | None]) -> Alignment:
    found: list[int | None] = []
    for index, wanted in enumerate(full):
        # Its own position first: a derivative legacy holds twice is `=` where it lines up.
        order = ([index] if index < len(legacy) else []) + [
            other for other in range(len(legacy)) if other != index]
        found.append(next((other for other in order if same(legacy[other], wanted)), None))
    return Alignment(tuple(legacy), tuple(full), tuple(found))


def arguments(call: CallDiff, kind: str, side: Literal["legacy", "full"]
              ) -> list[LabelledArg | None]:
    """One side's arguments of one kind from a call's rows, in hook order (rows are sorted)."""
    found = []
    for row in call.rows:
        if row.name.startswith(kind + "["):
            found.append(row.legacy if side == "legacy" else row.full)
    while found and found[-1] is None:  # a row the other hook alone has
        found.pop()
    return found


class ModuleTerms(Protocol):
    """What the verdict needs to know of the module (analysis/diff.py's _Module)."""

    module: str
    last_node: str | None
    legacy: PassTrace
    naming: Naming
    refusals: list[Refusal]

    def argument_index(self, call: ModuleCall, meaning: Meaning) -> int | None: ...

    def keyword_of(self, call: ModuleCall, meaning: Meaning) -> str | None: ...

    def is_leaf(self, name: str) -> bool: ...

    def tensor_words(self, name: str) -> str: ...


def verdict(terms: ModuleTerms, calls: tuple[CallDiff, ...]) -> str:
    module = module_title(terms.module)
    if not calls:
        return f"no backward ran through {module}: neither hook fires"
    if terms.refusals:
        return "; ".join(refusal_text(refusal) for refusal in terms.refusals)
    if all(call.legacy_seq is None for call in calls):
        if all(call.full_seq is None for call in calls):
            reasons = list(dict.fromkeys(
                finding.text for call in calls for finding in call.findings
                if finding.kind == "never_fires" and not finding.text.startswith("neither")))
            if reasons:  # each hook silent for its own reason, not for want of a gradient
                return "neither hook fires: " + "; ".join(reasons)
            return f"neither hook fires: no gradient reaches {module}"
        reason = next(finding.text for call in calls for finding in call.findings
                      if finding.kind == "never_fires")
        return f"{reason}: use register_full_backward_hook"
    differing = [call for call in calls if not all(row.same for row in call.rows)]
    if differing and all(same(row.legacy, row.full, changes_too=False)
                         for call in differing for row in call.rows):
        changed_in_full = any(arg is not None and arg.meaning is not None
                              and arg.meaning.modified_by is not None
                              for arg in arguments(differing[0], "grad_input", "full"))
        both = _listed(_meanings(arguments(differing[0], "grad_input",
                                           "legacy" if changed_in_full else "full")))
        return (f"legacy and full give the same derivatives ({both}), but your own backward "
                f"hook on {module} changes them in the one pass it runs in (see above)")
    if not differing:
        both = _listed(_meanings(arguments(calls[0], "grad_input", "legacy")))
        return (f"legacy and full agree: the operands of {op_title(terms.last_node or '?')} are "
                f"{module}'s arguments, in order, so both give {both}; "
                "register_full_backward_hook is still the one torch documents")
    return _Differs(terms, differing[0]).text()


class _Differs:
    """The verdict of a call whose hooks differ, clause by clause from its alignment."""

    def __init__(self, terms: ModuleTerms, call: CallDiff) -> None:
        self.terms = terms
        self.call = call
        self.module_call = terms.legacy.calls[call.call]
        self.module = module_title(terms.module)
        self.op = op_title(terms.last_node or "?")
        self.inputs = align(arguments(call, "grad_input", "legacy"),
                            arguments(call, "grad_input", "full"))
        self.legacy = _meanings(self.inputs.legacy)
        self.full = _meanings(self.inputs.full)

    def text(self) -> str:
        operands = "the input" if len(self.legacy) == 1 else "the operands"
        head = f"legacy grad_input is {_listed(self.legacy)}, {operands} of the last op {self.op}"
        if self.call.legacy_seq is None:
            return ("legacy does not fire for every call (see above): use "
                    "register_full_backward_hook")
        if self.call.full_seq is None:
            return f"{head}; the full hook does not fire here (see above)"
        wanted = self.wanted()
        missing = [index for index in wanted if self.inputs.found[index] is None]
        if not wanted:
            given = self.module_call.arguments or self.module_call.inputs
            why = (f"no input of {self.module} requires grad" if any(
                index is not None for index in given) or not given else
                f"none of {self.module}'s arguments is a tensor (full hooks see positional "
                "tensor arguments only: a list or a dict of tensors is not one)")
            return self.advised(f"{head}; full grad_input is {_listed(self.full)}, as {why}", [])
        if missing:
            return self.lacking(head, missing)
        moved = [index for index in wanted if self.inputs.found[index] != index]
        extras = self.extras()
        if not extras:
            return self.reordered(head, moved)
        what = self.kept(moved)
        others = [meaning for meaning in extras if self.keyword(meaning) is None]
        added = []
        if others:
            added.append(f"{', '.join(meaning.text for meaning in others)}, which "
                         f"{'is not' if len(others) == 1 else 'are not'} {self.module}'s "
                         f"{self.inputs_word(len(others))}")
        passed = [f"{meaning.text} (its keyword argument {self.keyword(meaning)})"
                  for meaning in extras if meaning not in others]
        if passed:
            added.append(f"{', '.join(passed)}, which full hooks leave out: their grad_input "
                         "has positional arguments only")
        clause = f"{head}: {what}, and it adds {'; and '.join(added)}"
        first = (["use register_full_backward_hook to get "
                  f"{_listed([self.full[index] for index in moved])} by argument"]
                 if moved else [])
        return self.advised(clause, first)

    def wanted(self) -> list[int]:
        """Full's derivatives legacy is measured against: not full's zeros for an input
        without grad where legacy has it nowhere (legacy's None says the same: no gradient)."""
        return [index for index in self.inputs.wanted() if not self.zeros_as_none(index)]

    def zeros_as_none(self, index: int) -> bool:
        """Full's `index`-th is zeros for an input without grad, and legacy has it nowhere."""
        meaning = self.full[index]
        return (self.inputs.found[index] is None and meaning is not None
                and meaning.kind == "zero")

    def inputs_word(self, count: int) -> str:
        return "input" if count == 1 else "inputs"

    def lacking(self, head: str, missing: list[int]) -> str:
        """Full's derivatives legacy lacks: `not ...`, and where the others are."""
        every = len(missing) == len(self.wanted()) and len(self.wanted()) == len(
            self.inputs.wanted())
        lacked = self.full if every else [self.full[index] for index in missing]
        found = [index for index in self.wanted() if index not in missing]
        inputs = self.inputs_word(len(lacked))
        text = f"{head}, not {_listed(lacked)}, {self.module}'s {inputs}"
        if found:
            moved = [index for index in found if self.inputs.found[index] != index]
            text += f" ({self.kept(moved)})"
        return self.advised(text, [f"use register_full_backward_hook for {_listed(lacked)}"])

    def kept(self, moved: list[int]) -> str:
        """`its grad_input[0] is full's ∂z/∂x`, or `[1] ... full's grad_input[0]`."""
        parts = []
        for index in self.wanted():
            position = self.inputs.found[index]
            if position is None:
                continue
            meaning = self.full[index]
            text = meaning.text if meaning else "None"
            where = "" if position == index else f" (full's grad_input[{index}])"
            parts.append(f"its grad_input[{position}] is full's {text}{where}")
        words = ", ".join(parts)
        if moved:
            words += (f", in {self.op}'s operand order, not {self.module}'s argument order")
        return words

    def reordered(self, head: str, moved: list[int]) -> str:
        """Only full's derivatives (and None) in legacy: in order, or in the op's order."""
        inputs = self.inputs_word(len(self.full))
        if not moved:
            if any(arg is not None and arg.value is None for arg in self.inputs.legacy):
                return (f"{head}: full's derivatives, plus None for {self.op}'s operands "
                        f"without gradient; register_full_backward_hook gives exactly "
                        f"{self.module}'s {inputs}")
            return (f"{head}: the same as full's grad_input; the hooks differ in grad_output "
                    "(see above)")
        return (f"{head}: the same derivatives as full's, in {self.op}'s operand order "
                "(with None where an operand has no gradient), not "
                f"{self.module}'s argument order: use register_full_backward_hook to get them "
                "by argument")

    def keyword(self, meaning: Meaning) -> str | None:
        """The keyword argument of the module a derivative is of, if it is one."""
        return self.terms.keyword_of(self.module_call, meaning)

    def extras(self) -> list[Meaning]:
        """legacy's derivatives that full does not give, in legacy's order."""
        taken = self.inputs.taken()
        return [meaning for index, meaning in enumerate(self.legacy)
                if meaning is not None and index not in taken]

    def advised(self, text: str, first: list[str]) -> str:
        """`text: <first>, or read p.grad ... for ∂z/∂p, or use a tensor hook on t ...`"""
        advice = list(first)
        for meaning in self.extras():
            if self.terms.argument_index(self.module_call, meaning) is not None:
                continue  # a module argument in another layout or share: full hooks give it
            wanted = f"∂{meaning.of}/∂{self.terms.naming.short(meaning.wrt)}"
            keyword = self.keyword(meaning)
            if keyword is not None:
                advice.append(f"pass {keyword} positionally for register_full_backward_hook "
                              f"to give {wanted}")
            elif self.terms.is_leaf(meaning.wrt) and meaning.partial:
                # .grad holds every use's share summed: not the one share legacy gave.
                advice.append(f"read {meaning.wrt}.grad for the whole {wanted} (legacy's is "
                              f"only the part via {meaning.partial})")
            elif self.terms.is_leaf(meaning.wrt):
                advice.append(f"read {meaning.wrt}.grad or use a post-accumulate-grad hook "
                              f"for {wanted}")
            elif ":" not in meaning.wrt and "#" not in meaning.wrt:
                advice.append(f"use a tensor hook on {self.terms.tensor_words(meaning.wrt)} "
                              f"for {wanted}")
        return f"{text}: {', or '.join(advice)}" if advice else text


def _meanings(args: Sequence[LabelledArg | None]) -> list[Meaning | None]:
    """Each argument's derivative; None for a None value (or a side without the entry)."""
    return [arg.meaning if arg is not None and arg.value is not None else None for arg in args]


def _listed(meanings: Sequence[Meaning | None]) -> str:
    """One derivative as it is; several as a tuple, in hook order."""
    texts = ["None" if meaning is None else meaning.text for meaning in meanings]
    return texts[0] if len(texts) == 1 else f"({', '.join(texts)})"


__all__ = ["Alignment", "ModuleTerms", "align", "arguments", "same", "verdict"]
