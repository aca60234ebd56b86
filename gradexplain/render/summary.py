"""The one-line summary `gradexplain validate` prints for a good spec."""

from __future__ import annotations

from gradexplain.language.distributed import DDP_FLAGS
from gradexplain.language.model import DistributedSpec, ModelSpec


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def validate_line(spec: ModelSpec) -> str:
    """`specs/two_modules.yaml: ok, two_modules: 2 modules, 2 layers, ...; backward of z`."""
    counts = spec.counts()
    parts = [
        _plural(counts.modules, "module"),
        _plural(counts.layers, "layer"),
        f"{_plural(counts.parameters, 'parameter')} ({_plural(counts.parameter_values, 'value')})",
        _plural(counts.steps, "step"),
    ]
    goals = []
    for backward in spec.backwards:
        times = f" x{backward.times}" if backward.times > 1 else ""
        goals.append(f"backward of {backward.of}{times}")
    if spec.grads:
        goals.append(_plural(len(spec.grads), "autograd.grad call"))
    expectations = [item.expect_error for item in spec.backwards]
    expectations += [item.expect_error for item in spec.grads]
    expectations += [item.expect_error for item in spec.interventions]
    expected = sum(1 for item in expectations if item is not None)
    if expected:
        goals.append(f"{expected} expected to fail")
    line = f"{spec.file}: ok, {spec.name}: {', '.join(parts)}; {', '.join(goals)}"
    return line if spec.distributed is None else f"{line}; {_distributed(spec.distributed)}"


def _distributed(section: DistributedSpec) -> str:
    """`2 ranks, ddp, split x, no_sync`: how --ranks runs the spec, and DDP's options that are
    not torch's defaults (every flag's default is false)."""
    count = section.written_ranks()
    parts = [_plural(count, "rank") if count is not None else "ranks from --ranks", section.wrap]
    if section.split:
        parts.append(f"split {' '.join(section.split)}")
    parts += [flag for flag in DDP_FLAGS if getattr(section.ddp, flag)]
    if section.ddp.bucket_cap_mb is not None:
        parts.append(f"bucket_cap_mb {section.ddp.bucket_cap_mb:g}")
    return ", ".join(parts)
