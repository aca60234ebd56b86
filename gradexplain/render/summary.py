"""The one-line summary `gradexplain validate` prints for a good spec."""

from __future__ import annotations

from gradexplain.language.model import ModelSpec


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
    return f"{spec.file}: ok, {spec.name}: {', '.join(parts)}; {', '.join(goals)}"
