"""The pinned view (records/pinned.py) from a walk and its diff: the per-module answer, and the
chain rule with every hook argument shown at the step its value is (LabelledArg.pin).

Which arguments are shown is the caller's filter (render/select.py): a `--module` or `--hook`
filter leaves out the chain-rule lines no shown argument is pinned to. Node hooks see every
step by construction; they are shown only when asked for (`node_hooks`). No torch here.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from gradexplain.records.claims import claim_text
from gradexplain.records.diff import ArgRow, HookDiff
from gradexplain.records.names import ACCUMULATE, Naming
from gradexplain.records.paths import module_title
from gradexplain.records.pinned import (
    AnswerRow,
    HookRef,
    Pinned,
    PinnedDerivation,
    PinnedLine,
    PinnedTerm,
    PinnedView,
)
from gradexplain.records.session import Session
from gradexplain.records.trace import HookKind, Mode
from gradexplain.records.walk import (
    Derivation,
    DerivationLine,
    LabelledArg,
    LabelledEvent,
    PassWalk,
    Pin,
    Place,
    Use,
    Walk,
)

NODE_HOOKS: tuple[HookKind, ...] = ("node_pre", "node")
BACKWARD_HOOKS: tuple[HookKind, ...] = ("backward", "full_backward_pre", "full_backward")
# Hooks both passes register alike: shown once when both passes pin them to the same step.
SHARED_HOOKS: tuple[HookKind, ...] = ("tensor", "post_accumulate_grad", *NODE_HOOKS)


def pinned_view(walk: Walk, diff: HookDiff | None, *, node_hooks: bool = False,
                filtered: bool = False) -> PinnedView:
    """The answer table (from `diff`; none without it) and every derivation with its pinned
    arguments. `filtered`: a --module or --hook filter is on, so lines with nothing pinned
    are left out (and counted)."""
    refs = _Refs(walk, node_hooks)
    derivations = tuple(_derivation(derivation, refs, walk.naming, filtered)
                        for derivation in walk.derivations)
    shown = {run for derivation in walk.derivations
             for run in (derivation.run, *derivation.repeats)}
    elsewhere = tuple(ref for run, found in sorted(refs.unpinned.items()) if run not in shown
                      for ref in found)
    return PinnedView(answers(diff) if diff is not None else (), derivations, elsewhere,
                      tuple(sorted(refs.other_graph.items())))


def session_view(session: Session, shown: Walk, module: str | None,
                 hooks: Collection[HookKind]) -> PinnedView:
    """The pinned view of `shown` (the session's walk as `render.select.select` filtered it
    with `module` and `hooks`): the answer table for the modules kept, when module backward
    hooks are shown (the renderers show the passes kept)."""
    from gradexplain.analysis.diff import compare
    from gradexplain.render.select import select_diff

    backward = not hooks or any(kind in BACKWARD_HOOKS for kind in hooks)
    diff = select_diff(compare(session), module) if backward else None
    return pinned_view(shown, diff, node_hooks=any(kind in NODE_HOOKS for kind in hooks),
                       filtered=module is not None or bool(hooks))


def answers(diff: HookDiff) -> tuple[AnswerRow, ...]:
    """Each module call's legacy and full arguments as derivatives, side by side."""
    runs = {call.run for module in diff.modules for call in module.calls}
    rows = []
    for module in diff.modules:
        called_again = any(call.ordinal > 1 for call in module.calls)
        for call in module.calls:
            if call.legacy_seq is None and call.full_seq is None:
                continue  # neither hook fired for this call in this run: nothing to compare
            parts = [f"call {call.ordinal}"] if called_again else []
            parts += [f"run {call.run}"] if len(runs) > 1 else []
            inputs = [row for row in call.rows if row.name.startswith("grad_input")]
            outputs = [row for row in call.rows if row.name.startswith("grad_output")]
            rows.append(AnswerRow(
                module_title(module.module), ", ".join(parts),
                _texts(inputs, "legacy"), _texts(inputs, "full"),
                _texts(outputs, "legacy"), _texts(outputs, "full"),
                all(row.same for row in inputs), all(row.same for row in outputs)))
    return tuple(rows)


def _texts(rows: list[ArgRow], side: str) -> tuple[str, ...] | None:
    """One side's arguments as derivatives (`None` for a None entry); None when the hook has
    none of them (it did not fire). An entry only the other side has is left out."""
    args = [arg for arg in (getattr(row, side) for row in rows) if arg is not None]
    if not args:
        return None
    return tuple(arg.meaning.text if arg.meaning is not None else "None" for arg in args)


@dataclass
class _Refs:
    """Every shown argument with a pin, by pin; the unpinned derivatives by call."""

    walk: Walk
    node_hooks: bool
    by_pin: dict[Pin, dict[str, list[HookRef]]] = field(default_factory=dict)
    unpinned: dict[int, list[HookRef]] = field(default_factory=lambda: defaultdict(list))
    other_graph: Counter[Mode] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.refused = {step.run for step in self.walk.runs if step.error is not None}
        for walk_pass in self.walk.passes:
            ordinals = _call_ordinals(walk_pass)
            for event in walk_pass.events:
                if event.hook in NODE_HOOKS and not self.node_hooks:
                    continue
                for arg in event.args:
                    self.add(walk_pass, event, arg, ordinals)

    def add(self, walk_pass: PassWalk, event: LabelledEvent, arg: LabelledArg,
            ordinals: dict[int, str]) -> None:
        meaning = arg.meaning
        if meaning is None or arg.value is None:
            return
        text = _ref_text(event, arg, ordinals, self.walk.naming)
        note = (f"changed by your hook {meaning.modified_by}" if meaning.modified_by
                else f"Σ over calls {', '.join(map(str, meaning.runs))}" if meaning.runs
                else f"stale: left by call {meaning.stale_from}" if meaning.kind == "stale"
                else None)
        if arg.pin is None and walk_pass.graph_changed and meaning.kind != "zero":
            self.other_graph[walk_pass.mode] += 1  # said once for the pass, not per argument
            return
        if arg.pin is None:
            # Zeros (where no gradient flows) and what no step shows: listed with why.
            why = ("" if meaning.kind == "zero"
                   else ": torch refused this call" if event.run in self.refused
                   else ": a sum of some shares")
            self.unpinned[event.run].append(HookRef(walk_pass.mode, event.hook, text,
                                                    arg.check, f"{meaning.text}{why}"))
            return
        side = "both" if event.hook in SHARED_HOOKS else walk_pass.mode
        found = self.by_pin.setdefault(arg.pin, {"legacy": [], "full": [], "both": []})
        found[side].append(HookRef(walk_pass.mode, event.hook, text, arg.check, note))

    def pinned(self, pin: Pin) -> Pinned:
        found = self.by_pin.get(pin)
        if found is None:
            return Pinned()
        sides: dict[str, list[HookRef]] = {"legacy": list(found["legacy"]),
                                           "full": list(found["full"]), "both": []}
        shared = found["both"]
        for ref in _once(shared):
            alike = [other for other in shared if other.text == ref.text]
            if {other.mode for other in alike} == {"legacy", "full"}:
                # One line for both passes, showing a failed check if either has one.
                sides["both"].append(min(alike, key=lambda item: item.holds))
            else:
                sides[ref.mode].append(ref)
        return Pinned(*(tuple(_once(sides[side])) for side in ("legacy", "full", "both")))


def _once(refs: list[HookRef]) -> list[HookRef]:
    """Each text once (a full pre-hook's grad_output is its full hook's; a call repeated)."""
    seen: dict[str, HookRef] = {}
    for ref in refs:
        seen.setdefault(ref.text, ref)
    return list(seen.values())


def _call_ordinals(walk_pass: PassWalk) -> dict[int, str]:
    """` (call 2)` for each call index of a module called more than once."""
    calls: dict[str, list[int]] = defaultdict(list)
    for event in walk_pass.events:
        if event.call is not None and event.call not in calls[event.target]:
            calls[event.target].append(event.call)
    return {call: f" (call {number})" for indices in calls.values() if len(indices) > 1
            for number, call in enumerate(sorted(indices), start=1)}


def _ref_text(event: LabelledEvent, arg: LabelledArg, ordinals: dict[int, str],
              naming: Naming) -> str:
    if event.hook == "tensor":
        return f"tensor hook on {naming.short(event.target)}"
    if event.hook == "post_accumulate_grad":
        return f"{naming.short(event.target)}.grad (post-accumulate hook)"
    if event.hook in NODE_HOOKS:
        return f"{event.hook} hook of {event.target} {arg.name}"
    call = "" if event.call is None else ordinals.get(event.call, "")
    return f"{module_title(event.target)}.{arg.name}{call}"


def _derivation(derivation: Derivation, refs: _Refs, naming: Naming,
                filtered: bool) -> PinnedDerivation:
    chain = _Chain(derivation, refs, naming)
    lines = []
    hidden = 0
    for index, line in enumerate(derivation.lines):
        pinned_line = chain.line(index, line)
        if filtered and not _has_refs(pinned_line):
            hidden += 1
            continue
        lines.append(pinned_line)
    unpinned = tuple(ref for run in (derivation.run, *derivation.repeats)
                     for ref in refs.unpinned.get(run, []))
    return PinnedDerivation(derivation, tuple(lines), hidden, unpinned)


def _has_refs(line: PinnedLine) -> bool:
    return bool(line.pinned) or any(term.pinned or term.total_pinned for term in line.terms)


@dataclass
class _Chain:
    """One derivation's steps with their pinned arguments, and where each tensor's shares are:
    a tensor with several shares in the call gets `the part via` on each, and its whole
    gradient is the line that starts from it, or, with no such line, the sum after its last
    share."""

    derivation: Derivation
    refs: _Refs
    naming: Naming

    def __post_init__(self) -> None:
        self.shares: dict[Place, list[tuple[int, int]]] = defaultdict(list)
        for index, line in enumerate(self.derivation.lines):
            for number, term in enumerate(line.terms):
                if term.edge is not None and term.at is not None:
                    self.shares[term.at].append((index, number))
        self.lines_at = {line.at for line in self.derivation.lines}

    def claim(self, wrt: str, via: Use | None = None) -> str:
        return claim_text(self.derivation.of, wrt, "as-is", () if via is None else (via,),
                          (), self.naming, self.derivation.seed is not None)[0]

    def count(self, place: Place | None) -> int:
        return 0 if place is None else len(self.shares.get(place, ()))

    def line(self, index: int, line: DerivationLine) -> PinnedLine:
        run = self.derivation.run
        terms = []
        for number, term in enumerate(line.terms):
            via = None
            if line.node == ACCUMULATE:
                text = f"{self.naming.short(term.wrt)}.grad"
            else:
                if self.count(term.at) > 1:
                    readers = sum(1 for other in line.terms if other.at == term.at)
                    via = Use(line.output, term.edge if readers > 1 else None)
                text = self.claim(term.wrt, via)
            total_of, total = None, Pinned()
            if (term.at is not None and self.count(term.at) > 1
                    and term.at not in self.lines_at
                    and self.shares[term.at][-1] == (index, number)):
                total_of = self.claim(term.wrt)
                total = self.refs.pinned(Pin(run, index, number, total=True))
            terms.append(PinnedTerm(text, term.wrt, via, term.local, term.value, term.check,
                                    term.modified_by, self.refs.pinned(Pin(run, index, number)),
                                    total_of, total))
        return PinnedLine(line.node, line.output, self.claim(line.output), line.upstream,
                          line.has_rule, self.count(line.at), self.refs.pinned(Pin(run, index)),
                          tuple(terms), line.others,
                          tuple(self.claim(other) for other in line.others))


__all__ = ["answers", "pinned_view", "session_view"]
