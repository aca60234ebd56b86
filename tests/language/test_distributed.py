"""The spec's `distributed:` section: every rule refused with its place (through the command line,
as test_bad_specs does), a good section read back field by field, validate's line, and
`rank_specs`, each rank's spec, against plain PyTorch: the ddp_hooks spec's local gradients and
their mean are the facts file's numbers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gradexplain.capture.build import build
from gradexplain.errors import Location, SpecSchemaError, SpecShapeError, UsageError
from gradexplain.language import load_spec, load_spec_text, rank_specs
from gradexplain.language.model import (
    DDPOptions,
    DistributedSpec,
    InputSpec,
    ModelSpec,
    TensorInit,
)
from gradexplain.render.summary import validate_line
from tests.helpers.badspecs import Case, assert_one_clear_line
from tests.helpers.capture import run_forward
from tests.helpers.cli import SPECS, run_cli

# Two batch rows of x; `k` whole numbers, `r` drawn, `s` a single number: the inputs a section
# may name, each for the rules it must break. The section's own lines start on line 11.
HEAD = """inputs:
  x: {value: [[1.0, 2.0], [3.0, 4.0]], requires_grad: true}
  k: {value: [1, 2], dtype: int64}
  r: {randn: [2]}
  s: 2.0
params: {w: [[0.5], [-1.0]]}
forward: ['y = x @ w', 'loss = sum(y)']
backward: loss
distributed:
  wrap: ddp
"""
LINE = 11  # the first line after HEAD


def section(*lines: str) -> str:
    return HEAD + "".join(f"  {line}\n" for line in lines)


def at(offset: int, anchor: str) -> str:
    """`LINE:ANCHOR` for the section's line `offset` (0: the first after HEAD); an anchor of
    digits only is a column (Case.line_col)."""
    return f"{LINE + offset}:{anchor}"


CASES = [
    # --- the section's own keys
    Case("unknown_key", section("rank: 2"), at(0, "rank"), "distributed.rank",
         ("unknown key 'rank'", "did you mean 'ranks'?")),
    Case("not_a_mapping", HEAD.replace("distributed:\n  wrap: ddp\n", "distributed: 2\n"),
         "9:14", "distributed", ("expected a mapping",)),
    Case("wrap_unknown", HEAD.replace("wrap: ddp", "wrap: dpp"), "10:dpp", "distributed.wrap",
         ("unknown wrap 'dpp'", "did you mean 'ddp'?", "ddp, fsdp")),
    Case("ranks_zero", section("ranks: 0"), at(0, "10"), "distributed.ranks",
         ("whole number >= 1",)),
    Case("ranks_nine", section("ranks: 9"), at(0, "10"), "distributed.ranks",
         ("whole number <= 8",)),
    Case("ranks_text", section("ranks: two"), at(0, "two"), "distributed.ranks",
         ("expected a whole number",)),
    # --- ddp options
    Case("ddp_under_fsdp", HEAD.replace("wrap: ddp", "wrap: fsdp") + "  ddp: {no_sync: true}\n",
         at(0, "ddp"), "distributed.ddp", ("DistributedDataParallel's options", "fsdp")),
    Case("ddp_unknown_option", section("ddp: {nosync: true}"), at(0, "nosync"),
         "distributed.ddp.nosync", ("unknown key 'nosync'", "did you mean 'no_sync'?")),
    Case("ddp_flag_not_boolean", section("ddp: {static_graph: 1}"), at(0, "1}"),
         "distributed.ddp.static_graph", ("expected true or false",)),
    Case("static_graph_with_no_sync", section("ddp: {static_graph: true, no_sync: true}"),
         at(0, "true}"), "distributed.ddp.no_sync",
         ("static_graph: true with no_sync: true", "pytorch/pytorch#143580", "keep one")),
    Case("bucket_zero", section("ddp: {bucket_cap_mb: 0}"), at(0, "0}"),
         "distributed.ddp.bucket_cap_mb", ("above 0",)),
    Case("bucket_negative", section("ddp: {bucket_cap_mb: -5}"), at(0, "-5"),
         "distributed.ddp.bucket_cap_mb", ("above 0", "got -5")),
    Case("bucket_huge", section("ddp: {bucket_cap_mb: 4096}"), at(0, "24"),
         "distributed.ddp.bucket_cap_mb", ("at most 1,024", "got 4,096")),
    Case("bucket_text", section("ddp: {bucket_cap_mb: big}"), at(0, "big"),
         "distributed.ddp.bucket_cap_mb", ("expected a number",)),
    # --- each rank's inputs
    Case("inputs_not_a_list", section("inputs: {x: 1.0}"), at(0, "{x"), "distributed.inputs",
         ("expected a list with one mapping of input values per rank",)),
    Case("inputs_empty", section("inputs: []"), at(0, "[]"), "distributed.inputs",
         ("an empty list",)),
    Case("inputs_too_many", section("inputs: [{}, {}, {}, {}, {}, {}, {}, {}, {}]"),
         at(0, "[{}"), "distributed.inputs", ("values for 9 ranks", "at most 8")),
    Case("inputs_item_not_a_mapping", section("inputs:", "  - [[1.0, 2.0], [3.0, 4.0]]"),
         at(1, "[[1.0"), "distributed.inputs[0]", ("expected a mapping of input names",)),
    Case("inputs_unknown_input", section("inputs:", "  - {xx: [[1.0, 2.0], [3.0, 4.0]]}"),
         at(1, "xx"), "distributed.inputs[0].xx",
         ("name error", "unknown input 'xx'", "did you mean 'x'?",
          "the spec's inputs: x, k, r, s")),
    Case("inputs_other_shape", section("inputs:", "  - {x: [[1.0, 2.0]]}"),
         at(1, "[[1.0"), "distributed.inputs[0].x",
         ("shape error", "shape [1, 2]", "declared input has shape [2, 2]")),
    Case("inputs_other_shape_zeros", section("inputs:", "  - {}", "  - {x: {zeros: [2, 3]}}"),
         at(2, "{zeros"), "distributed.inputs[1].x",
         ("shape [2, 3]", "declared input has shape [2, 2]")),
    Case("inputs_drawn_value", section("inputs:", "  - {x: {randn: [2, 2]}}"),
         at(1, "randn"), "distributed.inputs[0].x.randn",
         ("written, not drawn", "same draw on every rank")),
    Case("inputs_own_requires_grad",
         section("inputs:", "  - {x: {value: [[0.0, 0.0], [0.0, 0.0]], requires_grad: false}}"),
         at(1, "requires_grad"), "distributed.inputs[0].x.requires_grad",
         ("takes requires_grad from the declared input 'x'",)),
    Case("inputs_own_dtype", section("inputs:", "  - {k: {value: [1, 2], dtype: float32}}"),
         at(1, "dtype"), "distributed.inputs[0].k.dtype", ("takes dtype from the declared",)),
    Case("inputs_dtype_of_the_input", section("inputs:", "  - {k: [1, 2.5]}"), at(1, "2.5"),
         "distributed.inputs[0].k[1]", ("int64 tensor holds whole numbers",)),
    Case("inputs_for_a_drawn_input", section("inputs:", "  - {r: [1.0, 2.0]}"), at(1, "r:"),
         "distributed.inputs[0].r", ("'r' is drawn at random (randn)", "different models")),
    Case("inputs_count_against_ranks",
         section("ranks: 3", "inputs:", "  - {x: [[1.0, 2.0], [3.0, 4.0]]}", "  - {}"),
         at(2, "-"), "distributed.inputs", ("values for 2 ranks", "`ranks` is 3")),
    Case("inputs_and_split", section("inputs: [{}, {}]", "split: [x]"), at(1, "split"),
         "distributed.split", ("`inputs`", "`split`", "not both")),
    # --- the batch split
    Case("split_unknown_input", section("split: [xx]"), at(0, "xx"), "distributed.split[0]",
         ("unknown input 'xx'", "did you mean 'x'?")),
    Case("split_twice", section("split: [x, x]"), at(0, "x]"), "distributed.split[1]",
         ("'x' is named twice",)),
    Case("split_empty", section("split: []"), at(0, "[]"), "distributed.split",
         ("an empty list",)),
    Case("split_a_number", section("split: [s]"), at(0, "s]"), "distributed.split[0]",
         ("'s' is a single number", "no batch dimension")),
    Case("split_a_drawn_input", section("split: r"), at(0, "r"), "distributed.split",
         ("'r' is drawn at random (randn)",)),
    Case("split_not_divisible", section("ranks: 3", "split: [x]"), at(1, "x]"),
         "distributed.split[0]", ("batch of 2", "does not split into 3 equal parts")),
    Case("split_part_does_not_fit",
         section("ranks: 2", "split: [x]").replace("'y = x @ w'", "'y = reshape(x, 4, 1)'"),
         "7:reshape", "forward[0]",
         ("shape error", "split across 2 ranks", "each rank's part: x [1, 2]",
          "cannot reshape [1, 2]")),
    Case("split_gradient_of_the_whole_batch",
         section("ranks: 2", "split: [x]").replace(
             "backward: loss", "backward: {of: y, gradient: [[1.0], [1.0]]}"),
         "8:[[1.0", "backward.gradient", ("split across 2 ranks", "gradient has shape [2, 1]")),
    # --- bounds: the ranks' own values count as inputs do
    Case("rank_values_over_the_total",
         "inputs:\n  x: {zeros: [2000, 5000], requires_grad: true}\n"
         "forward: ['loss = sum(x)']\nbackward: loss\ndistributed:\n  inputs:\n"
         "    - {x: {zeros: [2000, 5000]}}\n    - {x: {zeros: [2000, 5000]}}\n"
         "    - {x: {zeros: [2000, 5000]}}\n",
         "9:[2000", "distributed.inputs[2].x.zeros",
         ("too large", "rank 2's value of 'x'", "30,000,000 elements", "20,000,000")),
    Case("rank_values_and_the_forward_over_the_total",
         "inputs:\n  x: {zeros: [2000, 5000], requires_grad: true}\n"
         "forward: ['loss = sum(x)']\nbackward: loss\ndistributed:\n  inputs:\n"
         "    - {x: {zeros: [2000, 5000]}}\n    - {x: {zeros: [2000, 5000]}}\n",
         "2:x", "inputs.x", ("too large", "30,000,000 elements in all")),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_bad_section_is_one_clear_line(case: Case, write_spec: Callable[[str], Path]) -> None:
    assert_one_clear_line(case, write_spec(case.text))


def test_the_cases_break_nothing_else() -> None:
    """The head the cases share is a good spec, with a section of its own or none."""
    anywhere = Location("")  # a section's place is not part of what it is
    assert load_spec_text(HEAD).distributed == DistributedSpec(None, "ddp", (), (), DDPOptions(),
                                                               anywhere)
    assert load_spec_text(HEAD.replace("distributed:\n  wrap: ddp\n", "")).distributed is None


# --- a good section, read back ---------------------------------------------------------------

def test_a_good_section_is_read_field_by_field() -> None:
    spec = load_spec_text(section(
        "ranks: 2",
        "inputs:",
        "  - {x: [[0.0, 1.0], [2.0, 3.0]], k: [3, 4]}",
        "  - {x: {zeros: [2, 2]}}",
        "ddp: {find_unused_parameters: true, static_graph: true, gradient_as_bucket_view: true,",
        "      bucket_cap_mb: 0.000001}",
    ), "good.yaml")
    section_read = spec.distributed
    assert section_read is not None
    assert section_read.ranks == 2
    assert section_read.wrap == "ddp"
    assert section_read.split == ()
    assert section_read.ddp == DDPOptions(find_unused_parameters=True, static_graph=True,
                                          gradient_as_bucket_view=True, bucket_cap_mb=1e-6)
    first, second = section_read.inputs
    assert first.values == (("x", TensorInit("value", (2, 2), "float32",
                                                   [[0.0, 1.0], [2.0, 3.0]])),
                            ("k", TensorInit("value", (2,), "int64", [3, 4])))
    assert second.values == (("x", TensorInit("zeros", (2, 2), "float32")),)
    # Places, for the runner's errors: the rank's mapping, and each value.
    assert (first.where and first.where.path) == ("distributed", "inputs", 0)
    assert section_read.where.path == ("distributed",)
    assert (section_read.where.line, section_read.where.column) == (10, 3)


def test_defaults_and_the_short_split() -> None:
    spec = load_spec_text(section("wrap: fsdp", "split: x").replace("  wrap: ddp\n", ""))
    assert spec.distributed is not None
    assert spec.distributed.ranks is None
    assert spec.distributed.wrap == "fsdp"
    assert spec.distributed.inputs == ()
    assert spec.distributed.split == ("x",)
    assert spec.distributed.ddp == DDPOptions()
    assert spec.distributed.written_ranks() is None


# --- validate's line -------------------------------------------------------------------------

def test_validate_says_ranks_and_wrap() -> None:
    result = run_cli("validate", "specs/ddp_hooks.yaml")
    assert result.code == 0, result
    assert result.stdout.strip().endswith("; backward of loss; 2 ranks, ddp"), result.stdout


@pytest.mark.parametrize(("lines", "says"), [
    (("split: x",), "; ranks from --ranks, ddp, split x"),
    (("ranks: 2", "split: [x]", "ddp: {no_sync: true, bucket_cap_mb: 0.5}"),
     "; 2 ranks, ddp, split x, no_sync, bucket_cap_mb 0.5"),
    (("inputs: [{}, {}, {}]", "ddp: {static_graph: true, find_unused_parameters: true}"),
     "; 3 ranks, ddp, find_unused_parameters, static_graph"),
])
def test_validate_line_names_what_is_not_a_default(lines: tuple[str, ...], says: str) -> None:
    line = validate_line(load_spec_text(section(*lines), "s.yaml"))
    assert line.endswith(says), line
    assert "rank" not in validate_line(load_spec_text(HEAD.replace("distributed:\n  wrap: ddp\n",
                                                                   ""), "s.yaml"))


# --- rank_specs --------------------------------------------------------------------------------

def inputs_of(spec: ModelSpec) -> dict[str, InputSpec]:
    return {item.name: item for item in spec.inputs}


def test_each_rank_gets_its_own_values() -> None:
    spec = load_spec(SPECS / "ddp_hooks.yaml")
    ranks = rank_specs(spec, 2)
    assert [inputs_of(rank)["x"].init.value for rank in ranks] == [[[1.0, 2.0]], [[-1.0, 0.5]]]
    for rank in ranks:
        assert rank.distributed == spec.distributed
        assert rank.tensors == spec.tensors
        assert rank.root == spec.root
        assert inputs_of(rank)["x"].requires_grad == inputs_of(spec)["x"].requires_grad


def test_a_rank_that_names_no_input_keeps_the_spec_s() -> None:
    spec = load_spec_text(section("inputs:", "  - {}", "  - {x: {ones: [2, 2]}, k: [5, 6]}"))
    first, second = rank_specs(spec, 2)
    assert first.inputs == spec.inputs
    assert inputs_of(second)["x"].init == TensorInit("ones", (2, 2), "float32")
    assert inputs_of(second)["k"].init == TensorInit("value", (2,), "int64", [5, 6])
    assert inputs_of(second)["r"] == inputs_of(spec)["r"]  # drawn as the spec draws it


def test_ranks_that_do_not_fit_the_section_are_refused() -> None:
    spec = load_spec(SPECS / "ddp_hooks.yaml")
    with pytest.raises(SpecSchemaError) as raised:
        rank_specs(spec, 3)
    assert raised.value.exit_code == 2
    assert "written for 2 ranks" in raised.value.message and "asks for 3" in raised.value.message
    assert raised.value.where is not None and raised.value.where.path == ("distributed",)
    unfixed = load_spec_text(section("inputs: [{}, {}]"))
    with pytest.raises(SpecSchemaError, match="values for 2 ranks, and the walk asks for 4"):
        rank_specs(unfixed, 4)
    for count in (0, 9):
        with pytest.raises(UsageError) as usage:
            rank_specs(spec, count)
        assert usage.value.exit_code == 2


def test_without_a_section_every_rank_has_the_spec() -> None:
    spec = load_spec(SPECS / "two_modules.yaml")
    assert rank_specs(spec, 3) == (spec, spec, spec)


BATCH = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]


def test_a_split_batch_is_cut_into_parts() -> None:
    spec = load_spec_text(f"""
inputs:
  x: {{value: {BATCH}, requires_grad: true}}
  b: {{zeros: [4, 1]}}
  t: [1.0, -1.0]
params: {{w: [[0.5], [-1.0]]}}
forward: ['y = x @ w + b', 'loss = sum(y)']
backward: loss
distributed: {{split: [x, b]}}
""")
    parts = rank_specs(spec, 2)
    assert [inputs_of(part)["x"].init.value for part in parts] == [BATCH[:2], BATCH[2:]]
    assert [inputs_of(part)["b"].init for part in parts] == [TensorInit("zeros", (2, 1),
                                                                        "float32")] * 2
    for part in parts:
        assert inputs_of(part)["t"] == inputs_of(spec)["t"]
        assert part.tensor("y") is not None and part.tensor("y").shape == (2, 1)  # type: ignore[union-attr]
        assert part.distributed == spec.distributed
    assert spec.tensor("y").shape == (4, 1)  # type: ignore[union-attr]
    four = rank_specs(spec, 4)
    assert [inputs_of(part)["x"].init.value for part in four] == [[row] for row in BATCH]
    with pytest.raises(SpecShapeError, match=r"batch of 4 .* does not split into 3 equal parts"):
        rank_specs(spec, 3)


def test_a_part_the_forward_does_not_fit_is_refused_at_run_time() -> None:
    spec = load_spec_text(f"""
inputs:
  x: {{value: {BATCH}, requires_grad: true}}
forward: ['y = reshape(x, 8)', 'loss = sum(y)']
backward: loss
distributed: {{split: x}}
""", "r.yaml")
    assert rank_specs(spec, 1)[0].inputs == spec.inputs
    with pytest.raises(SpecShapeError) as raised:
        rank_specs(spec, 2)
    line = raised.value.one_line()
    assert line.startswith("r.yaml:4:"), line
    assert "split across 2 ranks" in line and "x [2, 2]" in line, line


@given(rows=st.integers(1, 12), columns=st.integers(1, 3), ranks=st.integers(1, 8))
def test_the_parts_put_together_are_the_batch(rows: int, columns: int, ranks: int) -> None:
    batch = [[float(row * columns + column) for column in range(columns)] for row in range(rows)]
    spec = load_spec_text(f"""
inputs:
  x: {{value: {batch}, requires_grad: true}}
forward: ['loss = sum(x * 2)']
backward: loss
distributed: {{split: [x]}}
""")
    if rows % ranks:
        with pytest.raises(SpecShapeError):
            rank_specs(spec, ranks)
        return
    parts = [inputs_of(part)["x"].init for part in rank_specs(spec, ranks)]
    assert all(part.shape == (rows // ranks, columns) for part in parts)
    joined = [row for part in parts for row in part.value]  # type: ignore[union-attr]
    assert joined == batch


# --- the ddp_hooks spec, against plain torch ---------------------------------------------------

def local_grads(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The facts file's model in plain torch, on one rank's x: each parameter's gradient."""
    fc1, fc2 = torch.nn.Linear(2, 3), torch.nn.Linear(3, 1)
    with torch.no_grad():
        fc1.weight.copy_(torch.tensor([[0.1, 0.2], [0.3, -0.4], [-0.5, 0.6]]))
        fc1.bias.copy_(torch.tensor([0.01, 0.02, 0.03]))
        fc2.weight.copy_(torch.tensor([[0.7, -0.8, 0.9]]))
        fc2.bias.copy_(torch.tensor([0.05]))
    torch.nn.Sequential(fc1, torch.nn.Tanh(), fc2)(x).sum().backward()
    layers = {"fc1": fc1, "fc2": fc2}
    return {f"{layer}.{name}": param.grad for layer, module in layers.items()
            for name, param in module.named_parameters() if param.grad is not None}


def test_ddp_hooks_ranks_give_the_facts_local_gradients_and_mean() -> None:
    spec = load_spec(SPECS / "ddp_hooks.yaml")
    per_rank = []
    for rank, rank_spec in enumerate(rank_specs(spec, 2)):
        built = build(rank_spec)
        output, _ = run_forward(built)
        torch.autograd.backward(output)
        grads = {name: tensor.grad for name, tensor in built.leaves().items()
                 if tensor.grad is not None}
        plain = local_grads(torch.tensor([[1.0, 2.0], [-1.0, 0.5]][rank:rank + 1]))
        assert grads.keys() == plain.keys()
        for name, grad in plain.items():
            torch.testing.assert_close(grads[name], grad)
        per_rank.append(grads)
    # The numbers for fc2.weight (the facts file's 2.weight), within their rounding.
    expected = ([0.469945, -0.446244, 0.623065], [0.01, -0.446244, 0.680476])
    for grads, numbers in zip(per_rank, expected, strict=True):
        torch.testing.assert_close(grads["fc2.weight"], torch.tensor([numbers]), atol=1e-6,
                                   rtol=0)
    mean = (per_rank[0]["fc2.weight"] + per_rank[1]["fc2.weight"]) / 2
    torch.testing.assert_close(mean, torch.tensor([[0.239972, -0.446244, 0.651771]]),
                               atol=1e-6, rtol=0)
