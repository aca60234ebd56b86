"""`diff --format markdown`: still a GitHub table per call, well formed, and the same facts as the
records the text shows: each row's `=`/`≠`, why they differ, and each module's verdict, which for
a Conv2d says its grad_input[0] is full's (the row is `=`), never that legacy lacks it."""

from __future__ import annotations

import pytest

from gradexplain.analysis.diff import compare
from gradexplain.render.markdown_diff import diff_markdown, prose
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS
from tests.helpers.mdcheck import assert_markdown_well_formed, section, tables

SPEC_FILES = sorted(path.name for path in SPECS.glob("*.yaml"))


@pytest.mark.parametrize("spec", SPEC_FILES)
def test_markdown_tables_carry_each_rows_mark_and_reason(spec: str) -> None:
    diff = compare(captured(spec))
    text = diff_markdown(diff)
    assert_markdown_well_formed(text)
    found = iter(tables(text))
    for module in diff.modules:
        assert f"**Verdict:** {prose(module.verdict)}" in text
        for call in module.calls:
            header, rows = next(found)
            assert header[0] == "argument" and header[3:] == ["", "why they differ"]
            assert [cells[0] for cells in rows] == [f"`{row.name}`" for row in call.rows]
            for row, cells in zip(call.rows, rows, strict=True):
                assert cells[3] == ("=" if row.same else "≠"), (module.module, row.name)
                assert bool(cells[4]) == (not row.same), (module.module, row.name, cells)
    assert next(found, None) is None


def test_cnn_hooks_conv1_markdown_row_and_verdict_agree() -> None:
    text = diff_markdown(compare(captured("cnn_hooks.yaml")))
    conv1 = section(text, "`net.conv1`")
    (_, rows), = tables(conv1)
    first = next(cells for cells in rows if cells[0] == "`grad_input[0]`")
    assert first[3] == "="
    assert "its grad_input\\[0\\] is full's ∂score/∂image" in conv1
    assert "not ∂score/∂image" not in conv1
