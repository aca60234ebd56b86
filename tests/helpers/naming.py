"""The uniqueness check of a walk's names: every distinct tensor has a distinct name, and one
tensor has one name, in the labels of both passes and in the chain rule together.

A tensor is told apart by where it sits in the graph: its node's rank in the real graph's
breadth-first order from the output, and the output number (records.walk.Place, the same in both
passes). A label's place is where the labeller found its tensor (`Label.place`, read
structurally from the graph, never from names: the check finds the tensor by name, so a name
shared by two places is a claim no check can settle); a chain-rule line's and term's are recorded
with them (`at`). Zero labels (a gradient no real edge carries) have no place of their own and are
left out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from gradexplain.capture.label import label_pass
from gradexplain.records.session import Session
from gradexplain.records.walk import Place, Walk

# A place as the check compares them: a graph position, and the pass it is in where the full
# hooks changed what the model computes (then the two passes' graphs, and ranks, differ).
Where = tuple[str, int, int] | Place


@dataclass
class NameUses:
    """Each shown name with the places it names and where it was used, and the other way."""

    places: dict[str, set[Where]] = field(default_factory=lambda: defaultdict(set))
    names: dict[Where, set[str]] = field(default_factory=lambda: defaultdict(set))
    where: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, place: Where, where: str) -> None:
        self.places[name].add(place)
        self.names[place].add(name)
        self.where[name].append(where)

    def shared(self) -> dict[str, set[Where]]:
        """Names given to more than one tensor (of one pass, where the passes' graphs differ:
        then the same name in each pass is the same tensor computed another way)."""
        found = {}
        for name, places in self.places.items():
            by_pass: dict[str | None, int] = defaultdict(int)
            for place in places:
                by_pass[place[0] if len(place) == 3 else None] += 1
            if any(count > 1 for count in by_pass.values()):
                found[name] = places
        return found

    def doubled(self) -> dict[Where, set[str]]:
        """Tensors given more than one name."""
        return {place: names for place, names in self.names.items() if len(names) > 1}


def label_uses(session: Session, canonical: bool = False) -> NameUses:
    """Every labelled hook argument of both passes: its `wrt` as shown (or the canonical `wrt`
    of the JSON), at the place its claim is checked."""
    walk = session.walk
    uses = NameUses()
    for trace, walk_pass in zip(session.traces, walk.passes, strict=True):
        _, labelled = label_pass(trace, walk.naming)
        assert len(labelled) == len(walk_pass.events)
        for item, event in zip(labelled, walk_pass.events, strict=True):
            for label, arg in zip(item.labels, event.args, strict=True):
                if label.meaning is None or label.place is None:
                    continue
                # The labeller run again here labels exactly as the walk did.
                assert arg.meaning == label.meaning, (event.seq, arg.name)
                wrt = label.meaning.wrt
                place: Where = label.place
                if walk.passes[1].graph_changed:
                    place = (walk_pass.mode, *label.place)
                uses.add(wrt if canonical else walk.naming.short(wrt), place,
                         f"{walk_pass.mode} #{event.seq} {event.hook} {arg.name}")
    return uses


def walk_uses(session: Session) -> NameUses:
    """The labels' names (as shown) and the chain rule's, together."""
    walk = session.walk
    uses = label_uses(session)
    for derivation in walk.derivations:
        for line in derivation.lines:
            where = f"chain rule of run {derivation.run}, {line.node}"
            assert line.at is not None, where
            uses.add(walk.naming.short(line.output), _legacy(walk, line.at), where)
            for term in line.terms:
                assert term.at is not None, where
                uses.add(walk.naming.short(term.wrt), _legacy(walk, term.at),
                         f"{where} -> {term.wrt}")
    return uses


def _legacy(walk: Walk, place: Place) -> Where:
    """A chain-rule place (the chain rule reads the legacy pass's graph)."""
    return ("legacy", *place) if walk.passes[1].graph_changed else place


def assert_names_unique(session: Session) -> None:
    """No two distinct tensors share a name and no tensor has two, in labels and chain rule
    together (names as shown), nor in the labels' canonical `wrt` (the JSON's)."""
    for uses in (walk_uses(session), label_uses(session, canonical=True)):
        shared = {name: (sorted(places), uses.where[name][:4])
                  for name, places in uses.shared().items()}
        assert not shared, f"names shared by distinct tensors: {shared}"
        doubled = {place: sorted(names) for place, names in uses.doubled().items()}
        assert not doubled, f"tensors with more than one name: {doubled}"


__all__ = ["NameUses", "assert_names_unique", "label_uses", "walk_uses"]
