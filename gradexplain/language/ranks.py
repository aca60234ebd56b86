"""Each rank's own spec for `walk --ranks N` (`rank_specs`), in plain Python: no torch.

A rank's spec is the spec with its inputs replaced by that rank's values (`distributed: inputs:`),
or its split inputs cut to that rank's part of the batch (`distributed: split:`). Those values are
written, never drawn (distributed.py says why), so every rank's spec draws the same random
tensors in the same order from the same seed, and builds the same model.

A rank's own values have their input's shape, so its spec keeps the checked tensors as they are. A
part of a split batch has fewer rows, and a forward written for the whole batch (`reshape(x, 8)`,
a `gradient:` literal of the batch's shape) may not fit it: the part is checked again, names,
shapes and bounds, and refused before anything runs. `validate` does it for the number of ranks
the spec fixes itself (`check_ranks`); the runner does it for --ranks.
"""

from __future__ import annotations

from dataclasses import replace

from gradexplain.distributed import MAX_RANKS
from gradexplain.errors import SpecError, SpecSchemaError, SpecShapeError, UsageError
from gradexplain.language.check import check_spec
from gradexplain.language.distributed import refuse_drawn, split_problem
from gradexplain.language.model import (
    DistributedSpec,
    InputSpec,
    ModelSpec,
    RankInputs,
    TensorInit,
)
from gradexplain.language.shapes import show


def rank_specs(spec: ModelSpec, ranks: int) -> tuple[ModelSpec, ...]:
    """The spec of each of `ranks` ranks, rank 0 first, each with `distributed` kept.

    Without a `distributed:` section, or one that gives neither `inputs` nor `split`, every rank
    has the spec itself. Raises a SpecError (exit 2) when `ranks` does not fit the section: not
    its `ranks`, not one per `inputs` item, a split batch that does not cut into `ranks` equal
    parts, or a part the forward does not fit; a UsageError for a number of ranks no walk runs.
    """
    if not 1 <= ranks <= MAX_RANKS:
        raise UsageError(f"--ranks {ranks}: a walk runs 1 to {MAX_RANKS} ranks")
    section = spec.distributed
    if section is None:
        return (spec,) * ranks
    if section.ranks is not None and section.ranks != ranks:
        raise SpecSchemaError(
            f"the spec is written for {section.ranks} ranks (`ranks: {section.ranks}`), and "
            f"the walk asks for {ranks}", section.where)
    if section.inputs:
        if len(section.inputs) != ranks:
            raise SpecSchemaError(
                f"`inputs` gives values for {len(section.inputs)} ranks, and the walk asks for "
                f"{ranks}: one mapping per rank", section.where)
        return tuple(_with_values(spec, values) for values in section.inputs)
    if section.split:
        return _parts(spec, section, ranks)
    return (spec,) * ranks


def check_ranks(spec: ModelSpec) -> ModelSpec:
    """The checked spec, once each rank's spec is made for the number of ranks the spec fixes
    itself (`ranks`, or one per `inputs` item), so that validate refuses what a walk would."""
    count = spec.distributed.written_ranks() if spec.distributed is not None else None
    if count is not None:
        rank_specs(spec, count)
    return spec


def _with_values(spec: ModelSpec, values: RankInputs) -> ModelSpec:
    given = dict(values.values)
    return replace(spec, inputs=tuple(replace(item, init=given[item.name])
                                      if item.name in given else item for item in spec.inputs))


def _parts(spec: ModelSpec, section: DistributedSpec, ranks: int) -> tuple[ModelSpec, ...]:
    """Each rank's part of the split inputs; the parts differ in values only, so one of them is
    checked and its tensors serve them all."""
    split = section.split
    for item in spec.inputs:
        if item.name in split:
            refuse_drawn(item, section.where, "splitting it across ranks")
            problem = split_problem(item.name, item.init.shape, ranks)
            if problem is not None:
                raise SpecShapeError(f"{problem} (the walk asks for {ranks} ranks)",
                                     section.where)
    parts = [replace(spec, inputs=tuple(_part(item, rank, ranks) if item.name in split else item
                                        for item in spec.inputs), tensors=())
             for rank in range(ranks)]
    try:
        checked = check_spec(parts[0])
    except SpecError as error:
        cut = ", ".join(f"{item.name} {show(item.init.shape)}" for item in parts[0].inputs
                        if item.name in split)
        raise type(error)(f"with the batch split across {ranks} ranks (each rank's part: "
                          f"{cut}): {error.message}", error.where) from None
    return tuple(replace(part, tensors=checked.tensors) for part in parts)


def _part(item: InputSpec, rank: int, ranks: int) -> InputSpec:
    """The input cut to rows [rank * rows, (rank + 1) * rows) of its dim 0."""
    init = item.init
    rows = init.shape[0] // ranks
    value = init.value
    if init.kind == "value":
        assert isinstance(value, list)
        value = value[rank * rows:(rank + 1) * rows]
    shape = (rows, *init.shape[1:])
    return replace(item, init=TensorInit(init.kind, shape, init.dtype, value, init.where))
