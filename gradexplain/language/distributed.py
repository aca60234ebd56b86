"""The spec's `distributed:` section read into a DistributedSpec: how `walk --ranks N` runs the
spec (how many ranks, DistributedDataParallel or FSDP2, DDP's options) and what differs per rank
(each rank's own input values, or the batch split across the ranks), held against the declared
inputs here, at validate time.

A rank's values stand in for a declared input, so they have its shape and dtype: the checker
checked the forward with the declared input, and a value of another shape would slip past that
check. A split batch has another shape by design; ranks.py checks the forward again with a part.

Per-rank values and split inputs are written (a literal, zeros or ones), never drawn. A spec
draws its random tensors from its one seed, the inputs first and then every module's weights, in
build order: a rank whose input were drawn otherwise (another shape, another kind, or not at all)
would draw every weight after it from another place in the stream, so the ranks would build
different models, and a per-rank `randn` would be the same draw on every rank anyway.
"""

from __future__ import annotations

from typing import Protocol, get_args

from gradexplain.distributed import MAX_RANKS
from gradexplain.errors import (
    Location,
    SpecLimitError,
    SpecNameError,
    SpecSchemaError,
    SpecShapeError,
    quoted,
    show_number,
)
from gradexplain.language.catalogue import did_you_mean
from gradexplain.language.cursor import Cursor
from gradexplain.language.model import (
    INIT_KINDS,
    DDPOptions,
    DistributedSpec,
    DType,
    InitKind,
    InputSpec,
    RankInputs,
    TensorInit,
    WrapKind,
)
from gradexplain.language.scope import listed
from gradexplain.language.shapes import Shape, show

# torch's default is 25 MB. A tiny model's gradients fill a few hundred bytes, and 1e-6 MB gives
# one bucket per parameter (the facts file's `smallbucket`); past a gigabyte no spec here differs.
MAX_BUCKET_CAP_MB = 1024
SECTION_KEYS = ("ranks", "wrap", "inputs", "split", "ddp")
WRAPS: tuple[WrapKind, ...] = get_args(WrapKind)
DDP_FLAGS = ("find_unused_parameters", "static_graph", "gradient_as_bucket_view", "no_sync")
_DRAWN: tuple[InitKind, ...] = ("randn", "rand")
_RANK_EXAMPLE = "[{x: [[1.0, 2.0]]}, {x: [[-1.0, 0.5]]}]"


class TensorReader(Protocol):
    """The schema reader's tensor reads (schema._Reader), with which a rank's value is read."""

    def literal(self, cursor: Cursor, dtype: DType) -> TensorInit: ...

    def init(self, cursor: Cursor, fields: dict[str, Cursor], dtype: DType) -> TensorInit: ...


def read_distributed(cursor: Cursor, inputs: tuple[InputSpec, ...],
                     reader: TensorReader) -> DistributedSpec:
    """The `distributed:` section, every rule of the README's table checked, given the spec's
    declared `inputs`."""
    fields = cursor.mapping(SECTION_KEYS, what="a mapping like {ranks: 2, wrap: ddp}")
    wrap = (fields["wrap"].choice("ddp or fsdp", "wrap", WRAPS, ": DistributedDataParallel or "
                                  "FSDP2's fully_shard") if "wrap" in fields else "ddp")
    ranks = fields["ranks"].integer(1, MAX_RANKS) if "ranks" in fields else None
    ddp = _ddp_options(fields["ddp"], wrap) if "ddp" in fields else DDPOptions()
    if "inputs" in fields and "split" in fields:
        raise SpecSchemaError(
            "give `inputs` (each rank's own values) or `split` (the batch cut into one part per "
            "rank), not both", fields["split"].where_key())
    declared = {item.name: item for item in inputs}
    rank_inputs = (_rank_inputs(fields["inputs"], ranks, declared, reader)
                   if "inputs" in fields else ())
    split = _split(fields["split"], ranks, declared) if "split" in fields else ()
    return DistributedSpec(ranks, wrap, rank_inputs, split, ddp, cursor.where())


def split_problem(name: str, shape: Shape, ranks: int) -> str | None:
    """Why the input `name` of `shape` cannot be cut along dim 0 into `ranks` equal parts of
    at least one row each, or None when it can."""
    if not shape:
        return (f"{name!r} is a single number (shape []): it has no batch dimension (dim 0) to "
                "split")
    if shape[0] == 0:
        return f"{name!r} has shape {show(shape)}: an empty batch, with nothing to split"
    if shape[0] % ranks:
        return (f"{name!r} has shape {show(shape)}: its batch of {shape[0]} (dim 0) does not "
                f"split into {ranks} equal parts")
    return None


def refuse_drawn(item: InputSpec, where: Location | None, what: str) -> None:
    """Refuse `what` (a rank's own value of the input, or a split of it) when the declared
    input is drawn at random (see the module docstring)."""
    if item.init.kind in _DRAWN:
        raise SpecSchemaError(
            f"{item.name!r} is drawn at random ({item.init.kind}) from the spec's seed, so "
            f"{what} would move every random draw after it (the layers' weights) and the ranks "
            f"would build different models; declare {item.name!r} as a literal, zeros or ones",
            where)


def _ddp_options(cursor: Cursor, wrap: WrapKind) -> DDPOptions:
    if wrap != "ddp":
        raise SpecSchemaError(
            f"`ddp:` sets DistributedDataParallel's options, and this spec wraps in {wrap} "
            "(FSDP2's fully_shard takes none of them): drop `ddp:` or use `wrap: ddp`",
            cursor.where_key())
    fields = cursor.mapping((*DDP_FLAGS, "bucket_cap_mb"),
                            what="a mapping of DistributedDataParallel options like "
                                 "{no_sync: true}")

    def flag(key: str) -> bool:
        return fields[key].boolean() if key in fields else False

    cap = _bucket_cap(fields["bucket_cap_mb"]) if "bucket_cap_mb" in fields else None
    if flag("static_graph") and flag("no_sync"):
        # torch's reducer: under no_sync() no backward is prepared for, and static_graph's
        # first backward asserts that one was (pytorch/pytorch#143580, open for 2.13).
        fields["no_sync"].fail(
            "static_graph: true with no_sync: true fails inside torch 2.13's DDP: its first "
            "backward under no_sync() hits an internal assert (expect_autograd_hooks_, "
            "pytorch/pytorch#143580); keep one of the two")
    return DDPOptions(flag("find_unused_parameters"), flag("static_graph"),
                      flag("gradient_as_bucket_view"), cap, flag("no_sync"))


def _bucket_cap(cursor: Cursor) -> float:
    megabytes = cursor.number()
    if not 0 < megabytes <= MAX_BUCKET_CAP_MB:
        assert isinstance(cursor.value, int | float)
        cursor.fail(f"expected a bucket size in MB above 0 and at most {MAX_BUCKET_CAP_MB:,}, "
                    f"got {show_number(cursor.value)}")
    return megabytes


def _rank_inputs(cursor: Cursor, ranks: int | None, declared: dict[str, InputSpec],
                 reader: TensorReader) -> tuple[RankInputs, ...]:
    items = cursor.items(f"a list with one mapping of input values per rank, like "
                         f"{_RANK_EXAMPLE}")
    if not items:
        cursor.fail("an empty list: give one mapping of input values per rank, or leave "
                    "`inputs` out (every rank then has the spec's own inputs)")
    if len(items) > MAX_RANKS:
        cursor.fail(f"values for {len(items)} ranks; a walk runs at most {MAX_RANKS}",
                    SpecLimitError)
    if ranks is not None and len(items) != ranks:
        cursor.fail(f"values for {len(items)} ranks, but `ranks` is {ranks}: give one "
                    "mapping per rank")
    return tuple(_rank(item, declared, reader) for item in items)


def _rank(cursor: Cursor, declared: dict[str, InputSpec], reader: TensorReader) -> RankInputs:
    if not isinstance(cursor.value, dict):
        cursor.expected("a mapping of input names to this rank's values, like "
                        "{x: [[1.0, 2.0]]}")
    values = []
    for name, value in cursor.entries("a mapping of input names"):
        item = _declared(name, declared, value.where_key())
        refuse_drawn(item, value.where_key(), "giving a rank its own value of it")
        values.append((name, _rank_value(value, item, reader)))
    return RankInputs(tuple(values), cursor.where())


def _rank_value(cursor: Cursor, item: InputSpec, reader: TensorReader) -> TensorInit:
    dtype = item.init.dtype
    if isinstance(cursor.value, dict):
        for key in ("requires_grad", "dtype"):
            if key in cursor.value:
                raise SpecSchemaError(
                    f"a rank's value takes {key} from the declared input {item.name!r}; give "
                    "only its values (a literal, or value, zeros or ones)",
                    cursor.child(key, None).where_key())
        fields = cursor.mapping(INIT_KINDS,
                                what="a literal, or a mapping like {zeros: [1, 2]}")
        for kind in _DRAWN:
            if kind in fields:
                raise SpecSchemaError(
                    f"a rank's value is written, not drawn: a spec draws from its one seed in "
                    f"build order, so {kind} here would be the same draw on every rank and "
                    "would move every weight drawn after it; write the values, or zeros or ones",
                    fields[kind].where_key())
        init = reader.init(cursor, fields, dtype)
    else:
        init = reader.literal(cursor, dtype)
    if init.shape != item.init.shape:
        raise SpecShapeError(
            f"this rank's {item.name!r} has shape {show(init.shape)}, but the declared input "
            f"has shape {show(item.init.shape)}: a rank's value has its input's shape, with "
            "which the forward was checked", cursor.where())
    return init


def _split(cursor: Cursor, ranks: int | None,
           declared: dict[str, InputSpec]) -> tuple[str, ...]:
    if isinstance(cursor.value, list):
        items = cursor.items("a list of input names")
        if not items:
            cursor.fail("an empty list: name the inputs whose batch (dim 0) is cut into one "
                        "part per rank")
    else:
        items = [cursor]
    names: list[str] = []
    for item in items:
        name = item.text("an input name")
        if name in names:
            item.fail(f"{name!r} is named twice")
        spec_input = _declared(name, declared, item.where())
        refuse_drawn(spec_input, item.where(), "splitting it across ranks")
        problem = split_problem(name, spec_input.init.shape, ranks or 1)
        if problem is not None:
            raise SpecShapeError(problem + (f" (ranks: {ranks})" if ranks else ""),
                                 item.where())
        names.append(name)
    return tuple(names)


def _declared(name: str, declared: dict[str, InputSpec], where: Location) -> InputSpec:
    item = declared.get(name)
    if item is None:
        raise SpecNameError(
            f"unknown input {quoted(name)}{did_you_mean(name, list(declared))} (the spec's "
            f"inputs: {listed(list(declared), 'none')})", where)
    return item
