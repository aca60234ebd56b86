"""`diff` as text at 100 columns (colour off, as piped): one line per argument in columns that
stay put from module to module, values one line each, shortened but never split, why they
differ as full-width lines. Layout is checked on every spec and on models built here; the
numbers shown are checked against the same hooks registered on plain torch in the test."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from gradexplain import explain
from gradexplain.analysis.diff import compare
from gradexplain.records.diff import ArgRow, CallDiff, HookDiff
from gradexplain.records.numbers import fmt_nested
from gradexplain.render.console import plain_text
from gradexplain.render.fit import shortened
from gradexplain.render.text_diff import Columns, diff_text
from tests.helpers.capture import captured
from tests.helpers.cli import SPECS, run_cli
from tests.helpers.diffhooks import torch_hooks

WIDTH = 100
COLUMNS = Columns(WIDTH)
SPEC_FILES = sorted(path.name for path in SPECS.glob("*.yaml"))
SIDES = ("legacy", "full", "both")


class Scaled(nn.Module):
    """A long vector and a wide matrix: values the text has to shorten."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 4)
        self.w = nn.Parameter(torch.randn(4) * 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lin(x) * self.w
        return out


def _models() -> list[tuple[str, nn.Module, tuple[int, ...]]]:
    torch.manual_seed(3)
    return [
        ("linear", nn.Linear(4, 3), (2, 4)),
        ("linear_wide", nn.Linear(6, 4), (4, 6)),
        ("conv", nn.Sequential(nn.Conv2d(1, 2, 2), nn.Tanh()), (1, 1, 3, 3)),
        ("scaled", Scaled(), (4, 6)),
        ("mlp", nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)), (7, 3)),
    ]


MODELS = _models()


def check_layout(text: str, diff: HookDiff, width: int = WIDTH) -> list[tuple[ArgRow, list[str]]]:
    """Assert the layout rules; return each row with the lines under it (values, notes)."""
    lines = text.splitlines()
    columns = Columns(width)
    for line in lines:
        assert len(line) <= width, line
        assert line == line.rstrip(), line
        assert line.strip() not in {"✓", "=", "≠", "✓ =", "✓ ≠"}, line
    found: list[tuple[ArgRow, list[str]]] = []
    cursor = 0
    for module in diff.modules:
        for call in module.calls:
            cursor = _header(lines, cursor, call, columns)
            for row in call.rows:
                cursor, under = _row(lines, cursor, row, columns)
                found.append((row, under))
    return found


def _header(lines: list[str], cursor: int, call: CallDiff, columns: Columns) -> int:
    while not lines[cursor].startswith(f"  run {call.run}"):
        cursor += 1
    header = lines[cursor]
    if call.rows:  # the column heads sit where every row's cells start
        assert header[columns.legacy:].startswith("legacy"), header
        assert header[columns.full:].startswith("full"), header
    else:
        assert header[columns.legacy:] == "neither hook fired", header
    return cursor + 1


def _row(lines: list[str], cursor: int, row: ArgRow, columns: Columns
         ) -> tuple[int, list[str]]:
    line = lines[cursor]
    assert line.startswith(f"  {row.name} "), (row.name, line)
    # One line per argument: both labels and the mark, each in its fixed column.
    assert line[columns.mark] == ("=" if row.same else "≠"), line
    assert len(line) == columns.mark + 1, line
    for arg, start in ((row.legacy, columns.legacy), (row.full, columns.full)):
        if arg is not None and arg.value is not None and arg.meaning is not None:
            text = arg.meaning.text
            mark = "✓" if arg.check is None or arg.check.verified else "✗"
            if len(text) < columns.cell - 2:
                assert line[start:start + len(text) + 2] == f"{text} {mark}", line
    under: list[str] = []
    cursor += 1
    while cursor < len(lines) and lines[cursor].startswith(" " * columns.legacy):
        under.append(lines[cursor][columns.legacy:])
        cursor += 1
    notes = [item for item in under if item.startswith("why ≠: ")]
    assert bool(notes) == (not row.same), (row.name, under)
    return cursor, under


@pytest.mark.parametrize("spec", SPEC_FILES)
def test_every_spec_reads_at_100_columns(spec: str) -> None:
    diff = compare(captured(spec))
    text = plain_text(diff_text(diff), WIDTH)
    found = check_layout(text, diff)
    assert len(found) == sum(len(call.rows) for module in diff.modules for call in module.calls)
    for row, under in found:
        values = [item for item in under if item.split(" ", 1)[0] in SIDES]
        sides = [arg for arg in (row.legacy, row.full) if arg is not None and arg.value]
        assert len(values) == (0 if not sides else 1 if values and values[0].startswith("both")
                               else len(sides)), (row.name, under)
        for value in values:
            body = value.split(": ", 1)[1]
            assert body.count("[") == body.count("]"), value  # no row split across lines


def test_the_cli_pipes_the_same_layout_without_colour() -> None:
    result = run_cli("diff", "specs/cnn_hooks.yaml")
    assert result.code == 0, result.stderr
    assert "\x1b[" not in result.stdout
    check_layout(result.stdout, compare(captured("cnn_hooks.yaml")))
    conv1 = result.stdout.split("\nnet.conv1 ")[1].split("\n\n")[0].splitlines()
    row = next(line for line in conv1 if line.startswith("  grad_input[0] "))
    assert row[COLUMNS.mark] == "="
    verdict = " ".join(line.strip() for line in conv1[conv1.index(next(
        line for line in conv1 if line.startswith("  verdict: "))):])
    assert "its grad_input[0] is full's ∂score/∂image" in verdict
    assert "not ∂score/∂image" not in verdict


def test_a_failed_check_is_shown_loudly_on_a_line_of_its_own() -> None:
    """A label that failed its check: `✗` beside it, and the failure in full under the row."""
    diff = compare(captured("two_modules.yaml"))
    module2 = next(item for item in diff.modules if item.module == "module2")
    call = module2.calls[0]
    row = call.rows[0]
    assert row.legacy is not None and row.legacy.check is not None
    failed = replace(row.legacy, check=replace(row.legacy.check, verified=False,
                                                max_abs_err=0.25))
    broken = replace(diff, modules=(replace(module2, calls=(replace(call, rows=(
        replace(row, legacy=failed), *call.rows[1:])),)),))
    text = plain_text(diff_text(broken), WIDTH)
    (_, under), _ = check_layout(text, broken)
    line = next(line for line in text.splitlines() if line.startswith("  grad_input[0] "))
    assert line[COLUMNS.legacy:].startswith(f"{failed.meaning.text if failed.meaning else ''} ✗")
    assert "legacy check ✗ FAILED (error 0.25)" in under


@pytest.mark.parametrize("width", [80, 120])
def test_other_widths_keep_the_rules(width: int) -> None:
    diff = compare(captured("column_backward.yaml"))
    check_layout(plain_text(diff_text(diff), width), diff, width)


@pytest.mark.parametrize("name, model, shape", MODELS, ids=[item[0] for item in MODELS])
def test_values_shown_are_torch_hook_values(name: str, model: nn.Module,
                                            shape: tuple[int, ...]) -> None:
    torch.manual_seed(5)
    x = torch.randn(*shape, requires_grad=True)
    expected = {"legacy": torch_hooks(model, (x,), False), "full": torch_hooks(model, (x,), True)}
    diff = explain(model, x).diff()
    text = plain_text(diff_text(diff), WIDTH)
    rows = iter(check_layout(text, diff))
    checked = 0
    for module in diff.modules:
        for call in module.calls:
            for row in call.rows:
                got_row, under = next(rows)
                assert got_row is row
                kind, position = row.name[:-1].split("[")
                for line in under:
                    side, _, rest = line.partition(" ")
                    if side not in SIDES:
                        continue
                    shown_shape, body = rest.strip().split(": ", 1)
                    for pass_name in (("legacy", "full") if side == "both" else (side,)):
                        hooks = expected[pass_name][module.module][0]
                        tensor = hooks[0 if kind == "grad_input" else 1][int(position)]
                        assert shown_shape == (str(list(tensor.shape)) if tensor.dim()
                                               else "scalar")
                        assert_shows(body, tensor)
                        checked += 1
    assert checked >= 4


def assert_shows(body: str, tensor: torch.Tensor) -> None:
    """The printed values (5 significant digits), with `…` for elements left out, or the
    summary's statistics, are the tensor's."""
    if body.startswith("min "):
        numbers = dict(re.findall(r"(min|max|mean|norm) (\S+)", body))
        actual = {"min": tensor.min(), "max": tensor.max(), "mean": tensor.mean(),
                  "norm": tensor.norm()}
        for key, text in numbers.items():
            torch.testing.assert_close(float(text), float(actual[key]), rtol=1e-4, atol=1e-6)
        return
    shown = json.loads(body.replace("…", "null"))
    _compare(shown, tensor.tolist())


def _compare(shown: Any, actual: Any) -> None:
    if not isinstance(shown, list):
        assert isinstance(actual, (int, float)) and isinstance(shown, (int, float))
        assert math.isclose(shown, actual, rel_tol=1e-4, abs_tol=1e-6), (shown, actual)
        return
    assert isinstance(actual, list)
    if None not in shown:
        assert len(shown) == len(actual)
        pairs = list(zip(shown, actual, strict=True))
    else:  # leading items, `…`, then at most the last one
        cut = shown.index(None)
        tail = shown[cut + 1:]
        assert len(tail) <= 1 and cut + len(tail) < len(actual)
        pairs = list(zip(shown[:cut], actual[:cut], strict=True))
        pairs += [(tail[0], actual[-1])] if tail else []
    for item, expected in pairs:
        _compare(item, expected)


nested = st.recursive(
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda number: round(number, 3)),
    lambda children: st.lists(children, min_size=1, max_size=8), max_leaves=40)


@given(nested, st.integers(40, 100))
def test_fit_stays_in_its_room_and_keeps_rows_whole(value: Any, room: int) -> None:
    text = shortened(value, room)
    depth = 0
    probe = value
    while isinstance(probe, list):
        depth += 1
        probe = probe[0]
    if depth * len("[, …]") + len("-1.2346e+05") <= room:  # else the brackets alone overflow
        assert len(text) <= room, text
    assert text.count("[") == text.count("]")
    _compare_text(text, value)


def _compare_text(text: str, value: Any) -> None:
    shown = json.loads(text.replace("…", "null"))
    _compare(shown, json.loads(fmt_nested(value)))
