"""Pins: each labelled hook argument tied to the one chain-rule step its value is.

The labeller knows where each value flows in the graph (`label.Source`: a tensor's place and
the edges it is the sum of); the derivation knows each step's place (a line's output, a term's
edge). Joining the two is structural, never by value (values coincide: 1, zeros):
- one edge's share is that edge's term;
- a tensor's whole gradient is its one term when one use carries it, else the line that
  starts from it (its `g`: the shares added up), else, where no line starts from it (an
  autograd.grad input), the sum complete after its last share;
- a leaf's `.grad` is its AccumulateGrad line.
Zeros, forward values, calls torch refused and a full pass whose graph differs from the
derivation's get no pin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gradexplain.capture.label import Label, Source
from gradexplain.records.walk import Derivation, Meaning, Pin, Place


@dataclass
class _Chain:
    """One derivation's steps by place and by edge."""

    run: int
    lines: dict[Place, int] = field(default_factory=dict)  # a line's output -> line
    terms: dict[Place, list[tuple[int, int]]] = field(default_factory=dict)  # tensor -> terms
    edges: dict[Place, tuple[int, int]] = field(default_factory=dict)  # (rank, input) -> term


@dataclass
class Pins:
    """The steps of a walk's derivations, by place and by edge, to pin hook arguments to. Only
    a pass whose graph is the derivation's (the same ranks) is pinned: the caller leaves a
    full pass whose graph changed without."""

    chains: dict[int, _Chain]  # every call's index -> the derivation that shows it

    @classmethod
    def of(cls, derivations: tuple[Derivation, ...]) -> Pins:
        chains: dict[int, _Chain] = {}
        for derivation in derivations:
            chain = _Chain(derivation.run)
            for line_index, line in enumerate(derivation.lines):
                if line.at is None:
                    continue
                chain.lines.setdefault(line.at, line_index)
                for term_index, term in enumerate(line.terms):
                    step = (line_index, term_index)
                    if term.edge is not None:
                        chain.edges[(line.at[0], term.edge)] = step
                        if term.at is not None:
                            chain.terms.setdefault(term.at, []).append(step)
            for run in (derivation.run, *derivation.repeats):
                chains[run] = chain
        return cls(chains)

    def of_arg(self, label: Label, meaning: Meaning | None) -> Pin | None:
        """The step a labelled argument's value is; none for zeros, forward values and what no
        derivation shows. `meaning`: the argument's claim as recorded (a user's hook may have
        changed it)."""
        if label.source is None or meaning is None or meaning.kind == "zero":
            return None
        return self.pin(label.source)

    def pin(self, source: Source) -> Pin | None:
        chain = self.chains.get(source.run)
        if chain is None:
            return None  # torch refused this call: no derivation shows it
        if source.grad:
            line = chain.lines.get(source.place)
            return None if line is None else Pin(chain.run, line, 0)
        if source.edges is not None:
            if len(source.edges) != 1:
                return None  # a sum of some shares: no one step shows it
            step = chain.edges.get(source.edges[0])
            return None if step is None else Pin(chain.run, *step)
        shares = chain.terms.get(source.place, [])
        if len(shares) == 1:
            return Pin(chain.run, *shares[0])
        line = chain.lines.get(source.place)
        if line is not None:
            return Pin(chain.run, line)
        if shares:
            return Pin(chain.run, *shares[-1], total=True)
        return None


__all__ = ["Pins"]
