"""Is every hook argument pinned to the chain-rule step it is? `pin_problems(session)` lists what is
not: an argument left unpinned without a reason the walk states, or pinned to a step whose
derivative (of what, with respect to which tensor, which use) or value differs from its label.

The step's value comes from the hook-free check run, the argument's from the hooked pass: two
computations, compared with a tolerance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from gradexplain.records.graph import GraphView
from gradexplain.records.names import Naming
from gradexplain.records.session import Session
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import Derivation, LabelledArg, LabelledEvent, Meaning, Place


def pin_problems(session: Session) -> list[str]:
    """Every argument whose pin is missing or says something else than its label."""
    walk = session.walk
    places = {mode: _Places(GraphView(trace)) for mode in ("legacy", "full")
              if (trace := session.trace(mode)) is not None}
    chains = {run: derivation for derivation in walk.derivations
              for run in (derivation.run, *derivation.repeats)}
    refused = {step.run for step in walk.runs if step.error is not None}
    problems: list[str] = []
    for walk_pass in walk.passes:
        for event in walk_pass.events:
            for arg in event.args:
                meaning = arg.meaning
                if meaning is None or arg.value is None:
                    continue
                where = f"{walk_pass.mode} #{event.seq} {event.hook} {event.target} {arg.name}"
                run = meaning.stale_from or event.run
                if meaning.kind == "zero" or (arg.pin is None and (
                        run in refused or walk_pass.graph_changed)):
                    if arg.pin is not None:
                        problems.append(f"{where}: zeros pinned to a step")
                    continue
                if arg.pin is None:
                    problems.append(f"{where}: {meaning.text} is pinned to no step")
                    continue
                found = _step_problem(chains.get(run), event, arg, meaning, walk.naming,
                                      places[walk_pass.mode])
                if found:
                    problems.append(f"{where}: {meaning.text}: {found}")
    return problems


def pinned_step(derivation: Derivation, arg: LabelledArg) -> tuple[str, TensorValue | None]:
    """The tensor name and value of the step `arg` is pinned to."""
    assert arg.pin is not None
    line = derivation.lines[arg.pin.line]
    if arg.pin.term is None:
        return line.output, line.upstream
    term = line.terms[arg.pin.term]
    return term.wrt, None if arg.pin.total else term.value


@dataclass
class _Places:
    """Where a tensor name is in the graph, as (rank, output number): the same in both passes
    of a graph the full hooks did not change, and what derivation steps record (`at`)."""

    view: GraphView

    def __call__(self, name: str) -> set[Place]:
        return {(self.view.rank[node], number)
                for node, number in self.view.named_positions.get(name, ())}


def _step_problem(derivation: Derivation | None, event: LabelledEvent, arg: LabelledArg,
                  meaning: Meaning, naming: Naming, places: _Places) -> str | None:
    assert arg.pin is not None
    if derivation is None or derivation.run != arg.pin.run:
        return f"pinned to the chain rule of call {arg.pin.run}, not of its own call"
    if derivation.of != meaning.of:
        return f"pinned to a step of ∂{derivation.of}, not ∂{meaning.of}"
    name, value = pinned_step(derivation, arg)
    short = naming.short(meaning.wrt)
    # `t` names the step of `t`, `t (reshaped)` and `tᵀ` (the views a layout says), not `t2`.
    if not re.search(rf"(?<![\w.]){re.escape(short)}(?=ᵀ|\W|$)", naming.short(name)):
        return f"pinned to the step of {name}, not of {short}"
    line = derivation.lines[arg.pin.line]
    shares = sum(1 for item in derivation.lines for term in item.terms
                 if term.edge is not None and arg.pin.term is not None
                 and term.at == line.terms[arg.pin.term].at)
    if meaning.via:
        if arg.pin.term is None or len(meaning.via) != 1:
            return "a share pinned to a whole gradient"
        # The share via an op is the term of that op's line; through a view (a transposed
        # weight) `via` names the view op, whose output is the term's own tensor.
        term = line.terms[arg.pin.term]
        if not places(meaning.via[0].by) & {line.at, term.at}:
            return f"the part via {meaning.via[0].by} pinned to the part via {line.output}"
    elif shares > 1 and not arg.pin.total and event.hook != "post_accumulate_grad":
        return "a whole gradient pinned to one of its shares"
    if meaning.modified or meaning.runs or value is None:
        return None  # not the step's value by design (a hook changed it; several calls)
    if not _same(arg.value, value):
        return f"the step's value {value} is not the argument's {arg.value}"
    return None


def _same(got: TensorValue | None, want: TensorValue | None) -> bool:
    if got is None or want is None or got.shape != want.shape:
        return False
    if got.value is not None and want.value is not None:
        return torch.allclose(torch.tensor(got.value, dtype=torch.float64),
                              torch.tensor(want.value, dtype=torch.float64),
                              rtol=1e-4, atol=1e-6)
    if got.summary is not None and want.summary is not None:
        pairs = [(got.summary.min, want.summary.min), (got.summary.max, want.summary.max),
                 (got.summary.mean, want.summary.mean)]
        return all(abs(a - b) <= 1e-4 * (1 + abs(b)) for a, b in pairs)
    return False


__all__ = ["pin_problems", "pinned_step"]
