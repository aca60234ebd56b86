"""Distributed walks for tests: a Plan from spec text and each rank's inputs, run through
`capture_distributed` as `walk --ranks N` runs it. Each run forks its ranks (2-4 s), so a test
module holds one per configuration in a module-scoped fixture.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gradexplain.distributed.label import Setup
from gradexplain.distributed.run import Plan, capture_distributed
from gradexplain.language import load_spec_text
from gradexplain.language.model import DDPOptions, WrapKind
from gradexplain.records.distributed import DistributedWalk

# The facts file's model (../shared/reference/ddp-hook-facts.md): Linear(2, 3) -> Tanh ->
# Linear(3, 1) with its fixed weights, loss out.sum(); each rank's input below.
FACTS_SPEC = """\
name: ddp_hooks
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
FACTS_FILE = "ddp_hooks.yaml"


def _mini_launch() -> Any:
    # TEMPORARY until distributed/launch.py is on main: the spike's fork launcher.
    import importlib.util

    found = importlib.util.spec_from_file_location("minilaunch", "/tmp/spike/minilaunch.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module.run_ranks


_LAUNCH = _mini_launch()


def distributed_plan(text: str, inputs: Sequence[Mapping[str, Any]], wrap: WrapKind,
                     options: DDPOptions | None = None, name: str = FACTS_FILE) -> Plan:
    """The plan of spec text `text` on `len(inputs)` ranks, rank r's inputs given the values
    `inputs[r]` (the others as the spec makes them), wrapped in `wrap` with DDP `options`."""
    spec = load_spec_text(text, name)
    rank_specs = []
    for values in inputs:
        unknown = set(values) - {item.name for item in spec.inputs}
        assert not unknown, f"no such input: {unknown}"
        rank_specs.append(dataclasses.replace(spec, inputs=tuple(
            item if item.name not in values else dataclasses.replace(
                item, init=dataclasses.replace(item.init, value=values[item.name]))
            for item in spec.inputs)))
    setup = Setup(len(inputs), wrap, options or DDPOptions())
    return Plan(tuple(rank_specs), name, text, setup)


def distributed_walk(text: str, inputs: Sequence[Mapping[str, Any]], wrap: WrapKind,
                     options: DDPOptions | None = None,
                     name: str = FACTS_FILE) -> DistributedWalk:
    """The distributed walk of `distributed_plan`, its ranks forked by the real launcher."""
    return capture_distributed(distributed_plan(text, inputs, wrap, options, name), _LAUNCH)


def facts_walk(wrap: WrapKind, options: DDPOptions | None = None) -> DistributedWalk:
    """The facts file's model on its two ranks."""
    return distributed_walk(FACTS_SPEC, FACTS_INPUTS, wrap, options)


__all__ = ["FACTS_FILE", "FACTS_INPUTS", "FACTS_SPEC", "distributed_plan", "distributed_walk",
           "facts_walk"]
