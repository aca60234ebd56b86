"""What `--ranks N` runs: a Plan from a YAML spec (its `distributed:` section says what each
rank gets) or from a Python model (its batch cut into equal parts, one per rank), and the
wrapping the command line or the spec asks for. Everything wrong with the options is said
here, before any rank is started.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from gradexplain.distributed.label import Setup
from gradexplain.distributed.run import Plan
from gradexplain.errors import UsageError
from gradexplain.language.model import DDPOptions, ModelSpec, WrapKind
from gradexplain.records.trace import PYTHON_VALUE_LIMIT


def setup_for(spec: ModelSpec | None, ranks: int, wrap: WrapKind | None) -> Setup:
    """The world size and wrapping: `--wrap`, else the spec's `distributed.wrap`, else DDP;
    the spec's DDP options, which only DDP takes."""
    section = spec.distributed if spec is not None else None
    kind: WrapKind = wrap or (section.wrap if section is not None else "ddp")
    options = section.ddp if section is not None else DDPOptions()
    if kind != "ddp" and options != DDPOptions():
        raise UsageError(f"--wrap {kind}: the spec sets DDP options (distributed.ddp), which "
                         "only --wrap ddp takes")
    return Setup(ranks, kind, options)


def spec_plan(spec: ModelSpec, path: str, text: str, ranks: int, wrap: WrapKind | None,
              max_values: int | None, threads: int | None) -> Plan:
    """A YAML spec on `ranks` ranks: each rank's own spec from its `distributed:` section."""
    from gradexplain.language.ranks import rank_specs

    return Plan(rank_specs(spec, ranks), path, text, setup_for(spec, ranks, wrap),
                max_values=max_values, threads=threads)


def python_plan(target: str, shapes: Sequence[str], inputs_file: Path | None, loss: str,
                output: str | None, ranks: int, wrap: WrapKind | None,
                max_values: int | None, threads: int | None) -> Plan:
    """A Python model on `ranks` ranks: its inputs made (or loaded) once, each cut along dim 0
    into `ranks` equal parts, as a DistributedSampler gives each rank its share of a batch."""
    from gradexplain.capture.pymodel import (
        check_arity,
        load_inputs,
        load_model,
        parse_input,
        python_source,
        random_inputs,
    )
    from gradexplain.capture.usercode import blamed_on_user
    from gradexplain.output_path import WHOLE, parse_output_path

    if loss not in ("sum", "mean"):
        raise UsageError(f"loss {loss!r}: use 'sum' or 'mean'")
    if shapes and inputs_file is not None:
        raise UsageError("give --input shapes or --inputs FILE, not both")
    parsed = [parse_input(text) for text in shapes]
    path = WHOLE if output is None else parse_output_path(output)
    with blamed_on_user(target):
        model = load_model(target)
        tensors = load_inputs(inputs_file) if inputs_file is not None else random_inputs(parsed)
        check_arity(model, len(tensors), target)
    grads = None if inputs_file is not None else [item.requires_grad for item in parsed]
    parts = split_batch(tensors, ranks)
    sources = []
    with blamed_on_user(target, "set-up"):
        for rank_inputs in parts:
            sources.append(python_source(model, rank_inputs, target, loss,  # type: ignore[arg-type]
                                         f"gradexplain walk {target} --ranks {ranks}", path,
                                         grads))
    return Plan(tuple(source.spec for source in sources), target, sources[0].description,
                setup_for(None, ranks, wrap), tuple(source.build for source in sources),
                PYTHON_VALUE_LIMIT if max_values is None else max_values, threads)


def split_batch(tensors: Sequence[torch.Tensor], ranks: int) -> list[tuple[torch.Tensor, ...]]:
    """Each input cut along dim 0 into `ranks` equal parts: rank by rank, its inputs."""
    for number, tensor in enumerate(tensors):
        rows = tensor.shape[0] if tensor.dim() else 0
        if tensor.dim() == 0 or rows % ranks:
            what = "a scalar" if tensor.dim() == 0 else f"{rows} rows"
            raise UsageError(f"--ranks {ranks}: input {number} ({what}, shape "
                             f"{tuple(tensor.shape)}) cannot be cut into {ranks} equal parts "
                             f"along its batch dimension; give a batch divisible by {ranks}")
    return [tuple(tensor.chunk(ranks)[rank].clone() for tensor in tensors)
            for rank in range(ranks)]


__all__ = ["python_plan", "setup_for", "spec_plan", "split_batch"]
