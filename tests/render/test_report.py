"""`gradexplain report` and the golden files: one markdown page per spec, well formed (tables,
math, mermaid), byte-identical run after run, and the same from a saved session."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote_to_bytes

import pytest

from gradexplain.analysis.diff import compare
from gradexplain.analysis.order import first_firing_orders
from gradexplain.analysis.pinned import pinned_view
from gradexplain.api import Explanation
from gradexplain.render.console import plain_text
from gradexplain.render.report import SECTIONS, anchor, report_markdown
from gradexplain.render.select import select_diff
from gradexplain.render.text_diff import diff_text
from tests.helpers.articles import two_modules_in_torch
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS, run_cli, torch_imported_by
from tests.helpers.mdcheck import (
    assert_markdown_well_formed,
    fences,
    math_spans,
    parse,
    tables,
    walk_tokens,
)
from tests.helpers.printed import close_enough, printed_numbers

SPEC_FILES = sorted(path.name for path in SPECS.glob("*.yaml"))


def report_of(spec: str) -> str:
    """The page as `Explanation.report()` writes it (the diff and firing orders computed, then
    rendered), which `gradexplain report` must match byte for byte."""
    return Explanation(captured(spec)).report()


@pytest.mark.parametrize("spec", SPEC_FILES)
def test_report_matches_its_golden_file(spec: str, golden: object) -> None:
    golden(f"report/{Path(spec).stem}.md", report_of(spec))  # type: ignore[operator]


@pytest.mark.parametrize("spec", SPEC_FILES)
def test_diff_matches_its_golden_file(spec: str, golden: object) -> None:
    text = plain_text(diff_text(compare(captured(spec)))) + "\n"
    golden(f"diff/{Path(spec).stem}.txt", text)  # type: ignore[operator]


@pytest.mark.parametrize("spec", SPEC_FILES)
def test_every_total_the_report_gives_is_the_walks(spec: str) -> None:
    """The summary, the checks table's last row and its closing line count the same checks:
    every one the walk made (`walk` prints that count too)."""
    text = report_of(spec)
    walk = captured(spec).walk
    totals = {int(found.replace(",", "")) for found in
              re.findall(r"All ([\d,]+) checks verified", text)}
    assert totals == {len(walk.checks())}
    last_row = next(line for line in text.splitlines() if line.startswith("| **all**"))
    cells = [cell.strip(" *") for cell in last_row.strip("|").split("|")]
    assert int(cells[2].replace(",", "")) == len(walk.checks())


@pytest.mark.parametrize("spec", SPEC_FILES)
def test_report_is_well_formed_markdown(spec: str) -> None:
    text = report_of(spec)
    assert_markdown_well_formed(text)
    assert len(fences(text, "yaml")) == 1
    assert len(fences(text, "mermaid")) + text.count("too many to draw") == 2
    assert len(tables(text)) >= 4  # values, the diff, both timelines at least
    assert math_spans(text)
    for title in SECTIONS:
        assert f"\n## {title}\n" in text
        assert f"(#{anchor(title)})" in text


def test_report_numbers_are_torchs() -> None:
    """The classic example's key numbers, computed here in plain torch, are in the report."""
    grads = two_modules_in_torch()
    text = report_of("two_modules.yaml")
    # Read back as numbers, not matched as digits: torch here and the capture may round the
    # last bit differently on another CPU, and the fifth digit with it.
    shown = printed_numbers(text)
    for number in (float(grads["t"][0]), float(grads["y"][0]), float(grads["x"])):
        assert any(close_enough(value, number) for value in shown), number
    assert "∂z/∂t, the input of the last op Sigmoid, not ∂z/∂y, module2's input" in text
    assert "legacy hook: " in text or "legacy hooks: " in text


def test_the_report_shows_the_analyses_it_is_given() -> None:
    """The renderer computes no diff or firing order of its own: given module2's diff only and
    one pass's order, the page has exactly those (the modules read from the trace's calls)."""
    session = captured("two_modules.yaml")
    legacy = session.trace("legacy")
    assert legacy is not None
    modules = {call.module for call in legacy.calls}
    kept = sorted(name for name in modules if name.split(".")[0] == "module2")
    orders = first_firing_orders([legacy])
    diff = select_diff(compare(session), "module2")
    text = report_markdown(session, diff, pinned_view(session.walk, diff), orders)
    diff_section = text.split("\n## Legacy vs full\n")[1].split("\n## ")[0]
    assert sorted(re.findall(r"^### `([^`]*)`$", diff_section, re.M)) == kept
    order_section = text.split("\n## Firing order\n")[1].split("\n## ")[0]
    assert len(orders) == 1 and order_section.count("\n### ") == 1
    # The whole page, with both analyses in full, has what was left out above.
    whole = report_of("two_modules.yaml").split("\n## Legacy vs full\n")[1].split("\n## ")[0]
    assert "### `module`" in whole and "### `module`" not in diff_section


def test_report_is_byte_identical_across_processes(tmp_path: Path) -> None:
    first, second = tmp_path / "a.md", tmp_path / "b.md"
    for path in (first, second):
        result = run_cli("report", "specs/two_modules.yaml", "-o", str(path))
        assert result.code == 0, result.stderr
    assert first.read_bytes() == second.read_bytes()
    assert first.read_text(encoding="utf-8") == report_of("two_modules.yaml")
    assert not re.search(r"0x[0-9a-f]{6,}|\d{4}-\d{2}-\d{2}", first.read_text(encoding="utf-8"))


def test_a_saved_session_renders_the_same_as_a_fresh_run(tmp_path: Path) -> None:
    saved = tmp_path / "run.json"
    walked = run_cli("walk", "specs/vector_backward.yaml", "--save", str(saved))
    assert walked.code == 0, walked.stderr
    fresh = run_cli("report", "specs/vector_backward.yaml")
    loaded = run_cli("report", "--load", str(saved))
    assert fresh.code == loaded.code == 0
    assert loaded.stdout == fresh.stdout and fresh.stdout.startswith("# gradexplain report")
    for command in (["diff"], ["diff", "--format", "json"], ["walk", "--format", "markdown"]):
        assert run_cli(*command, "--load", str(saved)).stdout == run_cli(
            *command, "specs/vector_backward.yaml").stdout


def test_load_does_not_import_torch(tmp_path: Path) -> None:
    saved = tmp_path / "run.json"
    assert run_cli("walk", "specs/two_modules.yaml", "--save", str(saved)).code == 0
    assert not torch_imported_by("report", "--load", str(saved), "-o", str(tmp_path / "r.md"))
    assert not torch_imported_by("diff", "--load", str(saved))


def test_report_all_writes_one_report_per_spec_and_an_index(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    for name in ("two_modules.yaml", "vector_backward.yaml"):
        (folder / name).write_text((SPECS / name).read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "broken.yaml").write_text("inputs: [\n", encoding="utf-8")
    out = tmp_path / "reports"
    result = run_cli("report", "--all", str(folder), "-o", str(out))
    assert result.code == 2  # the broken spec is reported, the others still written
    assert "broken.yaml" in result.stderr and "Traceback" not in result.stderr
    assert sorted(path.name for path in out.iterdir()) == [
        "index.md", "two_modules.md", "vector_backward.md"]
    index = (out / "index.md").read_text(encoding="utf-8")
    assert_markdown_well_formed(index)
    assert "[two_modules](two_modules.md)" in index
    assert "[vector_backward](vector_backward.md)" in index


# Spec names that break a link written as is: a space or `)` ends it, `<...>` is raw HTML,
# a backtick or `|` cuts a table cell; bytes that are not UTF-8, and control characters.
ODD_NAMES = [b"a b", b"p)q", b"<img src=x>", b"t`ick", b"x|y", b"bad\xff", b"l\x1b[31m",
             b"n\nl", b"100%"]


def test_report_all_links_each_report_by_its_real_name(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    folder.mkdir()
    spec = (SPECS / "vector_backward.yaml").read_bytes()
    for name in ODD_NAMES:
        (folder / os.fsdecode(name + b".yaml")).write_bytes(spec)
    out = tmp_path / "reports"
    result = run_cli("report", "--all", str(folder), "-o", str(out))
    assert result.code == 0, result
    index = (out / "index.md").read_text(encoding="utf-8")
    assert_markdown_well_formed(index)
    tokens = list(walk_tokens(parse(index)))
    assert not [token for token in tokens if token.type in ("html_inline", "html_block")]
    hrefs = [str(token.attrs["href"]) for token in tokens if token.type == "link_open"]
    assert sorted(unquote_to_bytes(href) for href in hrefs) == sorted(
        name + b".md" for name in ODD_NAMES)
    for href in hrefs:
        assert (out / os.fsdecode(unquote_to_bytes(href))).is_file(), href


@pytest.mark.parametrize("args, message", [
    (("report",), "give a SPEC to run, or --load FILE"),
    (("report", "--all", "specs"), "--all needs -o FOLDER"),
    (("report", "--all", "nowhere", "-o", "x"), "--all nowhere: not a folder"),
    (("report", "specs/two_modules.yaml", "--load", "run.json"), "not both"),
])
def test_report_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    result = run_cli(*args)
    assert result.code == 2, result.stdout
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    # Neither a spec nor --load was "(not both)".
    assert ("not both" in result.stderr) == ("--load" in args and len(args) > 2)


@pytest.mark.parametrize("ending, start", [("\r\n", ""), ("\r", ""), ("\n", "\ufeff")],
                         ids=["CRLF", "CR", "byte-order mark"])
def test_the_spec_listing_shows_lines_as_yaml_reads_them(tmp_path: Path, ending: str,
                                                         start: str) -> None:
    """A spec written on Windows showed `\\x0d` at the end of every listed line, one with
    CR endings as one line, one with a byte-order mark a `\\ufeff` first."""
    lines = (SPECS / "two_modules.yaml").read_text(encoding="utf-8").splitlines()
    spec = tmp_path / "written.yaml"
    spec.write_bytes((start + ending.join(lines) + ending).encode("utf-8"))
    out = tmp_path / "report.md"
    assert run_cli("report", str(spec), "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    assert "\\x0d" not in page and "\\ufeff" not in page and "\r" not in page
    listing = page.split("```yaml\n", 1)[1].split("\n```", 1)[0]
    assert listing.splitlines() == lines[:len(listing.splitlines())]
    assert len(listing.splitlines()) > 5
