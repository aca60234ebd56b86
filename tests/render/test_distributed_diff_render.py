"""The single-process-against-distributed diff as text, JSON and markdown, and as the report's
"Under DistributedDataParallel" / "Under FSDP2" section: the numbers shown are plain torch's,
text stays within 100 columns, JSON fits its shipped schema, markdown renders on GitHub, and a
report without a distributed walk is the report it was."""

from __future__ import annotations

import json

import pytest
import torch

from gradexplain.analysis.diff import compare
from gradexplain.analysis.order import first_firing_orders
from gradexplain.analysis.pinned import pinned_view
from gradexplain.capture.pipeline import capture
from gradexplain.pages import report_page
from gradexplain.render.console import plain_text
from gradexplain.render.distributed_diff_json import distributed_diff_json
from gradexplain.render.distributed_diff_markdown import distributed_diff_markdown
from gradexplain.render.distributed_diff_text import WIDTH, distributed_diff_text
from gradexplain.render.distributed_outputs import distributed_diff_output
from gradexplain.render.report import anchor, report_markdown
from gradexplain.render.select import select_diff
from tests.distributed.test_walk_labels import NAMES, facts_local, fsdp_rows
from tests.helpers.distributed_diff import DiffRun, facts_fixture, facts_plan
from tests.helpers.mdcheck import assert_markdown_well_formed, section, tables
from tests.helpers.printed import close_enough, printed_numbers
from tests.helpers.schemacheck import assert_valid, parsed

ddp = facts_fixture("ddp")
fsdp = facts_fixture("fsdp")


def mean(name: str) -> torch.Tensor:
    return (facts_local(0)[name] + facts_local(1)[name]) / 2


def shows(text: str, expected: torch.Tensor) -> bool:
    """Every number of `expected` is among the numbers `text` prints (read back, not matched
    as digits)."""
    shown = printed_numbers(text)
    return all(any(close_enough(value, float(number)) for value in shown)
               for number in expected.flatten())


# --- text -------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [100, 160])
def test_text_stays_within_100_columns(ddp: DiffRun, fsdp: DiffRun, width: int) -> None:
    for result in (ddp, fsdp):
        lines = plain_text(distributed_diff_text(result.diff), width).split("\n")
        assert max(len(line) for line in lines) <= WIDTH


def test_text_shows_torchs_numbers_and_each_ranks_verdict(ddp: DiffRun) -> None:
    text = plain_text(distributed_diff_text(ddp.diff))
    for rank in range(2):
        assert f"rank {rank}" in text
        assert shows(text, facts_local(rank)["fc1.weight"])
    for name in NAMES:
        assert shows(text, mean(name))  # .grad under DDP
        assert shows(text, 2 * mean(name))  # the bucket's sum
    assert text.count("verdict: wrapping changed only .grad after backward") == 2
    assert "communication hook, bucket 0" in text


def test_text_names_the_silenced_and_changed_hooks(fsdp: DiffRun) -> None:
    text = plain_text(distributed_diff_text(fsdp.diff))
    for name in NAMES:
        assert f"silenced   tensor {name}" in text
        assert f"changed    post_accumulate_grad {name}" in text
    rows = mean("fc1.weight")[fsdp_rows(3, 0)]
    assert shows(text, rows)
    assert "register_hook never fires" in text


# --- JSON -------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["ddp", "fsdp"])
def test_json_fits_its_schema(request: pytest.FixtureRequest, which: str) -> None:
    result: DiffRun = request.getfixturevalue(which)
    document = parsed(distributed_diff_json(result.diff))
    assert_valid(document, "diff-distributed", f"{which} diff JSON")
    printed = "".join(distributed_diff_output(result.diff, "json"))  # type: ignore[arg-type]
    assert json.loads(printed) == document


def test_json_values_are_torchs(fsdp: DiffRun) -> None:
    document = parsed(distributed_diff_json(fsdp.diff))
    assert document["wrap"] == "fsdp" and document["world_size"] == 2
    for rank in document["ranks"]:
        for item in rank["passes"]:
            grads = {grad["name"]: grad for grad in item["grads"]}
            for name in NAMES:
                full = mean(name)
                expected = full[fsdp_rows(full.shape[0], rank["rank"])]
                got = torch.tensor(grads[name]["wrapped"]["value"], dtype=torch.float64)
                assert torch.allclose(got.reshape(expected.shape), expected.double(),
                                      atol=1e-6)
                assert grads[name]["changed"]
                assert grads[name]["wrapped"]["whose"]["scope"] == "mean"
            kinds = {call["kind"] for call in item["calls"]}
            # FSDP2 adds no hook call of its own: its forward hooks are not taken for the user's
            assert {"same", "changed", "silenced"} <= kinds and "added" not in kinds


# --- markdown and the report ---------------------------------------------------------------

@pytest.mark.parametrize("which", ["ddp", "fsdp"])
def test_markdown_is_well_formed(request: pytest.FixtureRequest, which: str) -> None:
    result: DiffRun = request.getfixturevalue(which)
    text = distributed_diff_markdown(result.diff)
    assert_markdown_well_formed(text)
    assert text.startswith("# One process vs ")
    for rank in range(2):
        assert f"\n## Rank {rank}\n" in text
    found = tables(text)
    # per rank and pass: the .grad table, and the buckets (DDP) or the changed calls (FSDP2)
    assert len(found) == 2 * 2 * 2
    assert distributed_diff_output(result.diff, "markdown") == text


def test_markdown_shows_torchs_numbers(ddp: DiffRun) -> None:
    text = distributed_diff_markdown(ddp.diff)
    for name in NAMES:
        assert shows(text, mean(name))
        assert shows(text, facts_local(1)[name])


def report_of(result: DiffRun, distributed: bool) -> str:
    """The report of rank 0's own spec, with the diff's section or without; `report_page`
    (what `report` and `explain(...).report()` call) gives the same page."""
    plan = facts_plan(result.diff.wrap)
    session = capture(plan.rank_specs[0], plan.spec_path, plan.spec_text, threads=1)
    diff = compare(session)
    view = pinned_view(session.walk, select_diff(diff, None))
    orders = first_firing_orders(session.traces)
    chosen = result.diff if distributed else None
    text = report_markdown(session, diff, view, orders, chosen)
    assert report_page(session, chosen) == text
    return text


@pytest.mark.parametrize("which, title", [("ddp", "Under DistributedDataParallel"),
                                          ("fsdp", "Under FSDP2")])
def test_report_section(request: pytest.FixtureRequest, which: str, title: str) -> None:
    result: DiffRun = request.getfixturevalue(which)
    text = report_of(result, True)
    assert_markdown_well_formed(text)
    assert f"(#{anchor(title)})" in text
    headings = [line for line in text.split("\n") if line.startswith("## ")]
    assert headings[headings.index("## Legacy vs full") + 1] == f"## {title}"
    body = section(text, title)
    assert "### Rank 0" in body and "### Rank 1" in body
    assert result.diff.ranks[0].verdict.split(";")[0] in body
    # Without the distributed walk the page is the one it was, byte for byte.
    plain = report_of(result, False)
    assert title not in plain
    assert text.replace(f"\n## {title}\n{body}", "").replace(
        f"- [{title}](#{anchor(title)})\n", "") == plain
