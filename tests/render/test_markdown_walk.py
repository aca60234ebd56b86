"""`walk --format markdown`: well-formed GitHub markdown for every spec, every hook argument a
table row, the numbers torch's own (computed here in plain torch), failures loud. (Its building
blocks: test_markdown.py, test_latex.py; the checker: tests/test_mdcheck.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
import torch

from gradexplain.records.numbers import fmt, fmt_nested
from gradexplain.records.trace import Nested
from gradexplain.records.walk import Check, Walk
from gradexplain.render.markdown import code, escape, math
from gradexplain.render.markdown_walk import (
    TIMELINE_HEADERS,
    forward_values_markdown,
    walk_markdown,
)
from tests.helpers.articles import legacy_hook_warnings, two_modules_in_torch
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS
from tests.helpers.mdcheck import (
    assert_markdown_well_formed,
    math_spans,
    section,
    tables,
)
from tests.helpers.printed import assert_printed, printed_skeleton

SPEC_PATHS = sorted(SPECS.glob("*.yaml"))


def shown(tensor: torch.Tensor | None) -> str:
    """How the markdown shows a (small) tensor: fmt'd numbers in a code span."""
    assert tensor is not None
    return code(fmt_nested(cast(Nested, tensor.tolist())))


def assert_shows(cell: str, tensor: torch.Tensor | None, what: str = "") -> None:
    """A cell shows `tensor` as `shown` would, its numbers equal up to printing's rounding: the
    tensor comes from the test's own torch code, which another CPU may round differently in
    the last bit, and then fmt's fifth digit can differ too."""
    assert tensor is not None
    assert printed_skeleton(cell) == printed_skeleton(shown(tensor)), (what, cell, shown(tensor))
    assert_printed(cell, tensor.flatten().tolist(), what)


Row = dict[str, str]


def timeline(text: str, mode: str) -> list[Row]:
    """The pass's timeline rows, each with its event's #, hook, target and node filled in
    (the markdown leaves them blank on an event's later rows)."""
    headers, rows = tables(section(text, f"Hook timeline: {mode} pass"))[0]
    assert tuple(headers) == TIMELINE_HEADERS
    found: list[Row] = []
    event: list[str] = []
    for row in rows:
        if row[0]:
            event = row[:4]
        assert event, "the first row of the table starts an event"
        found.append(dict(zip(headers, event + row[4:], strict=True)))
    return found


def event_rows(rows: list[Row], hook: str, target: str) -> dict[str, Row]:
    """The rows of the first `hook` event on `target`, by argument name."""
    seq = next(row["#"] for row in rows if row["hook"] == code(hook) and row["target"] == target)
    return {row["argument"].strip("`"): row for row in rows if row["#"] == seq}


def fail_arg(walk: Walk, mode: str, hook: str, target: str, arg_name: str) -> Walk:
    """The walk with one argument's check turned into a failure (error 0.5)."""
    passes = []
    for walk_pass in walk.passes:
        events = []
        for event in walk_pass.events:
            if walk_pass.mode == mode and event.hook == hook and event.target == target:
                args = tuple(
                    replace(arg, check=replace(arg.check, verified=False, max_abs_err=0.5))
                    if arg.name == arg_name and arg.check is not None else arg
                    for arg in event.args)
                event = replace(event, args=args)
            events.append(event)
        passes.append(replace(walk_pass, events=tuple(events)))
    return replace(walk, passes=tuple(passes))


# --- every spec ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SPEC_PATHS, ids=lambda path: path.stem)
def test_every_spec_renders_well_formed_markdown(path: Path) -> None:
    session = captured(path.name)
    text = walk_markdown(session.walk)
    assert_markdown_well_formed(text)
    for title in ("Chain rule", "Hook timeline: legacy pass", "Hook timeline: full pass",
                  "Checks"):
        assert f"\n## {title}\n" in text
    values = forward_values_markdown(session)
    assert_markdown_well_formed(values)
    assert math_spans(text), "the labels are math"
    assert walk_markdown(session.walk) == text, "same walk, same bytes"


@pytest.mark.parametrize("path", SPEC_PATHS, ids=lambda path: path.stem)
def test_every_hook_argument_is_a_row_in_order(path: Path) -> None:
    walk = captured(path.name).walk
    text = walk_markdown(walk)
    for walk_pass in walk.passes:
        rows = timeline(text, walk_pass.mode)
        expected = [(fmt(event.seq), code(arg.name)) for event in walk_pass.events
                    for arg in event.args]
        expected_empty = [fmt(event.seq) for event in walk_pass.events if not event.args]
        assert len(rows) == len(expected) + len(expected_empty)
        assert [(row["#"], row["argument"]) for row in rows
                if row["argument"] != "_(no arguments)_"] == expected
        assert [row["#"] for row in rows if row["argument"] == "_(no arguments)_"] == \
            expected_empty
        checked = [row for row in rows if row["check"]]
        assert len(checked) == sum(1 for event in walk_pass.events for arg in event.args
                                   if arg.check is not None)
        assert all(row["check"] == "✓" for row in checked)


@pytest.mark.parametrize("path", SPEC_PATHS, ids=lambda path: path.stem)
def test_every_legacy_hook_says_where_it_sits(path: Path) -> None:
    walk = captured(path.name).walk
    legacy = section(walk_markdown(walk), "Hook timeline: legacy pass")
    whys = [event for walk_pass in walk.passes for event in walk_pass.events
            if walk_pass.mode == "legacy" and event.why]
    assert whys, "every spec has a module with a legacy backward hook"
    for event in whys:
        assert f"- {code('#' + fmt(event.seq))} " in legacy
        assert escape(event.why or "") in legacy


# --- the classic example, against plain torch ------------------------------------------------


def test_module2_legacy_grad_input_is_dz_dt_and_full_is_dz_dy() -> None:
    grads = two_modules_in_torch()
    text = walk_markdown(captured("two_modules.yaml").walk)
    legacy = event_rows(timeline(text, "legacy"), "backward", code("module2"))
    assert_shows(legacy["grad_input[0]"]["value"], grads["t"], "legacy module2 grad_input[0]")
    assert legacy["grad_input[0]"]["derivative"] == math(r"\frac{\partial z}{\partial t}")
    assert legacy["grad_input[0]"]["check"] == "✓"
    assert legacy["grad_input[0]"]["node"] == code("SigmoidBackward0")
    full = event_rows(timeline(text, "full"), "full_backward", code("module2"))
    assert_shows(full["grad_input[0]"]["value"], grads["y"], "full module2 grad_input[0]")
    assert full["grad_input[0]"]["derivative"] == math(r"\frac{\partial z}{\partial y}")
    assert shown(grads["y"]) != shown(grads["t"]), "the two labels must be told apart"
    module = event_rows(timeline(text, "legacy"), "backward", code("module"))
    assert_shows(module["grad_input[0]"]["value"], grads["module.p"], "module grad_input[0]")
    assert_shows(module["grad_input[1]"]["value"], grads["x"], "module grad_input[1]")


def test_chain_rule_terms_are_torchs_gradients() -> None:
    grads = two_modules_in_torch()
    chain = section(walk_markdown(captured("two_modules.yaml").walk), "Chain rule")
    expected = [
        (r"\frac{\partial z}{\partial t} = g \odot \sigma(t)(1 - \sigma(t))", " = ", "t"),
        (r"\frac{\partial z}{\partial p} = g \odot x", " = ", "module.p"),
        # x is a number, p two: x's share is summed back over the dim it was broadcast along
        (r"\frac{\partial z}{\partial x} = g \odot p,\text{ summed over the broadcast dims}",
         " = ", "x"),
        (r"x.\mathrm{grad} \mathrel{+}= g", " = ", "x"),
    ]
    for latex, joint, name in expected:
        head = f"{math(latex)}{joint}"
        lines = [line for line in chain.splitlines() if head in line]
        assert lines, head
        for line in lines:
            value, mark = line.split(head, 1)[1].split(" ← ")[0].rsplit(" ", 1)
            assert mark == "✓", line
            assert_shows(value, grads[name], head)
    assert "### Run 1: backward of `z`" in chain
    # The hook arguments that are ∂z/∂t are pinned to its step: legacy module2's, not full's.
    (sigmoid,) = [line for line in chain.splitlines()
                  if r"\frac{\partial z}{\partial t} = g \odot" in line]
    legacy, full = sigmoid.split(" ← legacy: ")[1].split("; full: ")
    assert code("module2.grad_input[0]") in legacy
    assert code("module2.grad_input[0]") not in full


def test_final_grads_are_torchs() -> None:
    grads = two_modules_in_torch()
    text = walk_markdown(captured("two_modules.yaml").walk)
    for mode in ("legacy", "full"):
        headers, rows = tables(section(text, f"Final .grad: {mode} pass"))[0]
        assert headers == ["leaf", ".grad", "check"]
        names = ("x", "module.p", "module2.l.weight")
        assert sorted(row[0] for row in rows) == sorted(code(name) for name in names)
        for row in rows:
            name = row[0].strip("`")
            assert row[2] == "✓", row
            assert_shows(row[1], grads[name], f"{mode} {name}.grad")


def test_forward_values_are_torchs() -> None:
    grads = two_modules_in_torch()
    headers, rows = tables(forward_values_markdown(captured("two_modules.yaml")))[0]
    assert headers == ["tensor", "other names", "shape", "requires grad", "leaf", "value"]
    by_name = {row[0]: row for row in rows}
    assert list(by_name) == [code(name) for name in
                             ("x", "module.p", "module2.l.weight", "y", "module2.t", "z")]
    assert by_name[code("y")] == [code("y"), f"{code('module.y')}, {code('module2.x')}",
                                  code("[2]"), "yes", "no", shown(grads["y value"])]
    assert_shows(by_name[code("z")][5], grads["z value"], "z")
    assert by_name[code("x")][3:5] == ["yes", "yes"]


def test_warnings_are_a_table() -> None:
    walk = captured("two_modules.yaml").walk
    legacy = next(walk_pass for walk_pass in walk.passes if walk_pass.mode == "legacy")
    headers, rows = tables(section(walk_markdown(walk), "Torch's warnings: legacy pass"))[0]
    assert headers == ["modules", "phase", "category", "message", "count"]
    # Each message once, whatever number of modules gave it.
    torch_said = legacy_hook_warnings()
    assert len(rows) == len(set(torch_said))
    # Each message is what torch itself warns for the same hooks on the article's model, and
    # its count is how often torch warned it.
    torch_says = {escape(message) for _, message in torch_said}
    assert all(row[2] == code("FutureWarning") and row[3] in torch_says for row in rows), (
        rows, torch_says)
    assert sum(int(row[4]) for row in rows) == len(torch_said)
    for warning in legacy.warnings:
        name = warning.module or "the model"
        assert any(name in row[0] for row in rows), (name, rows)


def test_headings_follow_level() -> None:
    text = walk_markdown(captured("two_modules.yaml").walk, level=3)
    assert "\n### Chain rule\n" in text and "\n#### Run 1: backward of `z`\n" in text
    assert "\n### Hook timeline: legacy pass\n" in text
    assert "\n#### Final .grad: legacy pass\n" in text
    assert "\n## " not in text


def test_a_partial_label_stays_in_its_cell() -> None:
    """label.py writes `\\Big|_{...}` for a share via one use; a bare `|` would split the row."""
    walk = captured("two_modules.yaml").walk
    latex = r"\frac{\partial z}{\partial y}\Big|_{\mathrm{via}\ t}"
    passes = []
    for walk_pass in walk.passes:
        events = tuple(replace(event, args=tuple(
            replace(arg, meaning=replace(arg.meaning, latex=latex, partial="t"))
            if arg.meaning is not None else arg for arg in event.args))
            for event in walk_pass.events)
        passes.append(replace(walk_pass, events=events))
    text = walk_markdown(replace(walk, passes=tuple(passes)))
    assert_markdown_well_formed(text)
    rows = timeline(text, "legacy")
    assert rows[-1]["derivative"] == r"$\frac{\partial z}{\partial y}\Big\vert _{\mathrm{via}\ t}$"
    assert rows[-1]["check"] == "✓"


def test_render_code_does_not_import_torch() -> None:
    code_ = ("import sys, gradexplain.render.markdown_walk, gradexplain.render.latex; "
             "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code_], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "False"


# --- checks ----------------------------------------------------------------------------------


def checks_rows(text: str) -> dict[str, list[str]]:
    headers, rows = tables(section(text, "Checks"))[0]
    assert headers == ["checked", "verified", "of", "failed"]
    return {row[0]: row[1:] for row in rows}


def test_checks_count_every_check() -> None:
    walk = captured("two_modules.yaml").walk
    text = walk_markdown(walk)
    rows = checks_rows(text)
    args = sum(1 for event in walk.passes[0].events for arg in event.args if arg.check)
    assert rows[f"{walk.passes[0].mode} pass: hook arguments"] == [fmt(args), fmt(args), "0"]
    terms = sum(len(line.terms) for derivation in walk.derivations for line in derivation.lines)
    assert rows["chain rule terms"] == [fmt(terms), fmt(terms), "0"]
    total = sum(int(row[1]) for name, row in rows.items() if name != "**all**")
    assert rows["**all**"] == [f"**{total}**", f"**{total}**", "**0**"]
    assert f"✓ All {total} checks verified" in section(text, "Checks")
    assert "FAILED" not in text and "[!CAUTION]" not in text


def test_a_failed_hook_argument_is_loud() -> None:
    walk = fail_arg(captured("two_modules.yaml").walk, "legacy", "backward", "module2",
                    "grad_input[0]")
    assert len(walk.failures()) == 1
    text = walk_markdown(walk)
    assert_markdown_well_formed(text)
    header = text.split("\n## ")[0]
    assert "> [!CAUTION]" in header and "✗ 1 of" in header and "FAILED" in header
    row = event_rows(timeline(text, "legacy"), "backward", code("module2"))["grad_input[0]"]
    assert row["check"] == "✗ **FAILED** (error 0.5)"
    checks = section(text, "Checks")
    assert checks_rows(text)["legacy pass: hook arguments"][2] == "1"
    assert checks_rows(text)["**all**"][2] == "**1**"
    failed = section(text, "Failed checks")
    assert "> [!CAUTION]" in failed
    found = re.search(re.escape("`#13 backward module2 grad_input[0]`: claimed ∂z/∂t; the "
                                "hook-free run gives ") + r"(`[^`]*`) \(error 0\.5\)", failed)
    assert found is not None, failed
    assert_shows(found.group(1), two_modules_in_torch()["t"], "the hook-free ∂z/∂t")
    assert "✓ All" not in checks


def test_a_failed_chain_rule_term_is_listed() -> None:
    walk = captured("two_modules.yaml").walk
    derivation = walk.derivations[0]
    line = derivation.lines[0]
    term = line.terms[0]
    assert term.check is not None
    broken = replace(term, check=Check(False, 0.25, term.check.expected))
    lines = (replace(line, terms=(broken, *line.terms[1:])), *derivation.lines[1:])
    walk = replace(walk, derivations=(replace(derivation, lines=lines),
                                      *walk.derivations[1:]))
    text = walk_markdown(walk)
    assert_markdown_well_formed(text)
    found = re.search(re.escape(r"(1 - \sigma(t))$ = ") + r"(`[^`]*`)"
                      + re.escape(" ✗ **FAILED** (error 0.25)"), text)
    assert found is not None, text
    assert_shows(found.group(1), two_modules_in_torch()["t"], "∂z/∂t")
    assert checks_rows(text)["chain rule terms"][2] == "1"
    assert "derivation of run 1, SigmoidBackward0" in section(text, "Failed checks")
