"""Distributed walks for tests: a Plan from spec text and each rank's inputs, run through
`capture_distributed` as `walk --ranks N` runs it; and the facts file's model, as a spec, as plain
torch (the oracle of its gradients) and as a module-scoped fixture (`facts_fixture`). Each run
forks its ranks (2-4 s), so a test module holds one per configuration.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.distributed.plan import spec_plan
from gradexplain.distributed.run import Plan, capture_distributed
from gradexplain.language import load_spec_text
from gradexplain.language.model import DDPOptions, WrapKind
from gradexplain.records.distributed import DistributedWalk

# The facts file's model (../shared/reference/ddp-hook-facts.md): Linear(2, 3) -> Tanh ->
# Linear(3, 1) with its fixed weights, loss out.sum(); each rank's input below.
FACTS_MODEL = """\
name: facts
seed: 0
inputs:
  x: {value: [[1.0, 2.0]]}
layers:
  fc1: {Linear: {in_features: 2, out_features: 3}, weight: [[0.1, 0.2], [0.3, -0.4], [-0.5, 0.6]],
        bias: [0.01, 0.02, 0.03]}
  act: Tanh
  fc2: {Linear: {in_features: 3, out_features: 1}, weight: [[0.7, -0.8, 0.9]], bias: [0.05]}
forward: ["h = fc1(x)", "a = act(h)", "out = fc2(a)", "loss = sum(out)"]
backward: loss
"""
FACTS_INPUTS: tuple[dict[str, Any], ...] = ({"x": [[1.0, 2.0]]}, {"x": [[-1.0, 0.5]]})
FACTS_FILE = "facts.yaml"
# The spec's names and nn.Sequential's for the same parameters.
NAMES = {"fc1.weight": "0.weight", "fc1.bias": "0.bias", "fc2.weight": "2.weight",
         "fc2.bias": "2.bias"}


def facts_model() -> nn.Sequential:
    """The facts file's model, written out in plain torch."""
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    values = {"0.weight": [[0.1, 0.2], [0.3, -0.4], [-0.5, 0.6]], "0.bias": [0.01, 0.02, 0.03],
              "2.weight": [[0.7, -0.8, 0.9]], "2.bias": [0.05]}
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(torch.tensor(values[name]))
    return model


def facts_local(rank: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s own gradients by the spec's names: its input alone, one process, no
    hooks, plain torch (the oracle every distributed value of the facts model is held to)."""
    model = facts_model()
    model(torch.tensor(FACTS_INPUTS[rank]["x"])).sum().backward()
    grads = {name: parameter.grad for name, parameter in model.named_parameters()}
    found = {name: grads[torch_name] for name, torch_name in NAMES.items()}
    return {name: grad.clone() for name, grad in found.items() if grad is not None}


def with_ranks(text: str, inputs: Sequence[Mapping[str, Any]]) -> str:
    """Spec text with a `distributed:` section giving rank r the values `inputs[r]`."""
    lines = ["distributed:", f"  ranks: {len(inputs)}", "  inputs:"]
    lines += [f"    - {json.dumps(dict(values))}" for values in inputs]
    return text.rstrip("\n") + "\n" + "\n".join(lines) + "\n"


# The facts model with its `distributed:` section, as a spec file would hold it.
FACTS_SPEC = with_ranks(FACTS_MODEL, FACTS_INPUTS)


def distributed_plan(text: str, inputs: Sequence[Mapping[str, Any]], wrap: WrapKind,
                     options: DDPOptions | None = None, name: str = FACTS_FILE) -> Plan:
    """The plan `walk SPEC --ranks N --wrap WRAP` makes of spec text `text` (without a
    `distributed:` section) given rank r's inputs `inputs[r]`, with DDP `options`."""
    full = with_ranks(text, inputs)
    spec = load_spec_text(full, name)
    if options is not None:
        assert spec.distributed is not None
        spec = dataclasses.replace(spec, distributed=dataclasses.replace(spec.distributed,
                                                                         ddp=options))
    return spec_plan(spec, name, full, len(inputs), wrap, None, 1)


def distributed_walk(text: str, inputs: Sequence[Mapping[str, Any]], wrap: WrapKind,
                     options: DDPOptions | None = None,
                     name: str = FACTS_FILE) -> DistributedWalk:
    """The distributed walk of `distributed_plan`, its ranks forked by the real launcher."""
    return capture_distributed(distributed_plan(text, inputs, wrap, options, name))


def facts_walk(wrap: WrapKind, options: DDPOptions | None = None) -> DistributedWalk:
    """The facts file's model on its two ranks."""
    return distributed_walk(FACTS_MODEL, FACTS_INPUTS, wrap, options)


def facts_fixture(name: str, wrap: WrapKind,
                  options: DDPOptions | None = None) -> Callable[[], DistributedWalk]:
    """A module-scoped fixture `name`: the facts model's walk, run once per test module that
    sets `name = facts_fixture(name, ...)`."""

    @pytest.fixture(scope="module", name=name)
    def made() -> DistributedWalk:
        return facts_walk(wrap, options)

    return made


__all__ = ["FACTS_FILE", "FACTS_INPUTS", "FACTS_MODEL", "FACTS_SPEC", "NAMES",
           "distributed_plan", "distributed_walk", "facts_fixture", "facts_local", "facts_model",
           "facts_walk", "with_ranks"]
