"""The pinned view as people read it: `walk`'s text opens with the answer and the chain rule with
every hook argument at its step; a residual's shares say whose part they are and add up; the
filters narrow every section; the notebook view is the same; plain torch is the oracle.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch
from torch import nn

from gradexplain import explain
from gradexplain.analysis.pinned import pinned_view
from gradexplain.records.pinned import PinnedLine, PinnedTerm
from gradexplain.render.console import plain_text
from gradexplain.render.markdown_walk import walk_markdown
from gradexplain.render.text_walk import walk_text
from tests.helpers.articles import two_modules_in_torch
from tests.helpers.capture import capture_text, captured
from tests.helpers.cli import SPECS, run_cli
from tests.helpers.printed import assert_printed
from tests.helpers.pymodels import SelfAttention

SPEC_FILES = sorted(path.name for path in SPECS.glob("*.yaml"))


def step_block(lines: list[str], derivative: str) -> list[str]:
    """The lines of the chain-rule share `→ derivative = ...` and the arguments pinned to it."""
    start = next(number for number, line in enumerate(lines)
                 if line.startswith(f"  → {derivative} = "))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("      "):
            break
        block.append(line)
    return block


def test_two_modules_answers_within_the_first_screen() -> None:
    """module2's legacy grad_input[0] is ∂z/∂t at the Sigmoid and the full one ∂z/∂y, each
    shown with torch's value, in the first 60 lines at 100 columns."""
    grads = two_modules_in_torch()
    result = run_cli("walk", str(SPECS / "two_modules.yaml"))
    assert result.code == 0, result.stderr
    screen = result.stdout.splitlines()[:60]
    table = [line for line in screen if line.startswith("module2 ")]
    assert table and re.search(r"grad_input +∂z/∂t +≠ ∂z/∂y", table[0])
    for derivative, mode, tensor in (("∂z/∂t", "legacy", "t"), ("∂z/∂y", "full", "y")):
        block = step_block(screen, derivative)
        assert_printed(block[0].split(" = ")[-1], grads[tensor].flatten().tolist(), derivative)
        pinned = " ".join(block).split("← ", 1)[1]
        sides = dict(re.findall(r"(legacy|full): ([^;]*)", pinned))
        assert "module2.grad_input[0]" in sides[mode].split(", ")
        other = "full" if mode == "legacy" else "legacy"
        assert "module2.grad_input[0]" not in sides.get(other, "").split(", ")


@pytest.mark.parametrize("spec_file", SPEC_FILES)
@pytest.mark.parametrize("timeline", [False, True])
def test_text_fits_100_columns(spec_file: str, timeline: bool) -> None:
    """No line over 100 characters, none that is only a check mark."""
    walk = captured(spec_file).walk
    text = plain_text(walk_text(walk, timeline=timeline))
    for line in text.splitlines():
        assert len(line) <= 100, line
        assert line.strip() not in ("✓", "✗", "✗ FAILED"), text


@pytest.mark.parametrize("spec_file", SPEC_FILES)
def test_no_formula_reads_none(spec_file: str) -> None:
    """An operand without grad (a number, a constant tensor) is named, never `None`."""
    walk = captured(spec_file).walk
    formulas = [term.local for derivation in walk.derivations for line in derivation.lines
                for term in line.terms]
    assert formulas and not [item for item in formulas if re.search(r"\bNone\b", item)]


def test_a_constant_operand_is_named_as_written() -> None:
    lines = [term.local for derivation in captured("embedding.yaml").walk.derivations
             for line in derivation.lines for term in line.terms]
    assert "g ⊙ c" in lines


class Residual(nn.Module):
    """y = x + f(x), then a second residual on y: x's gradient is two shares, y's two."""

    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Linear(3, 3)
        self.g = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + self.f(x)
        result: torch.Tensor = y + torch.tanh(self.g(y))
        return result


def shares_of(lines: tuple[PinnedLine, ...], name: str) -> list[PinnedTerm]:
    """The terms handing `name` a share of its gradient (not its leaf's `.grad +=`)."""
    return [term for line in lines for term in line.terms
            if term.wrt == name and term.derivative.startswith("∂")]


def test_a_residuals_shares_say_whose_part_they_are_and_add_up() -> None:
    torch.manual_seed(0)
    model, x = Residual(), torch.randn(2, 3, requires_grad=True)
    result = explain(model, x)
    assert result.failures() == []
    (derivation,) = pinned_view(result.walk, None).derivations
    shares = shares_of(derivation.lines, "x")
    assert len(shares) == 2
    assert all("(only the part via " in share.derivative for share in shares)
    assert len({share.derivative for share in shares}) == 2, "each share says which use"
    # They add up to x's gradient, as plain torch computes it.
    plain = x.detach().clone().requires_grad_()
    model(plain).sum().backward()
    assert plain.grad is not None
    total = sum(torch.tensor(share.value.value) for share in shares
                if share.value is not None and share.value.value is not None)
    torch.testing.assert_close(total, plain.grad, rtol=1e-5, atol=1e-6)
    # The step x's gradient starts from says so.
    (leaf,) = [line for line in derivation.lines if line.terms and
               line.terms[0].derivative == "x.grad"]
    assert leaf.shares == 2
    text = plain_text(walk_text(result.walk))
    assert "(g adds up the 2 shares of x above)" in text


def test_module_and_hook_filters_narrow_the_chain_rule() -> None:
    spec = str(SPECS / "two_modules.yaml")
    whole = run_cli("walk", spec).stdout
    only = run_cli("walk", spec, "--module", "module")
    assert only.code == 0, only.stderr
    pinned = [line for line in only.stdout.splitlines() if "← " in line or
              line.startswith(" " * 8)]
    assert pinned and all("module2" not in line and "<model>" not in line for line in pinned)
    assert "steps with none of the shown hook arguments left out" in only.stdout
    assert len(only.stdout.splitlines()) < len(whole.splitlines())
    assert re.search(r"^module +grad_input", only.stdout, re.M)
    assert not re.search(r"^module2", only.stdout, re.M)
    tensors = run_cli("walk", spec, "--hook", "tensor")
    assert tensors.code == 0, tensors.stderr
    assert "tensor hook on t" in tensors.stdout
    assert "grad_input[0]" not in tensors.stdout
    assert "what each module's backward hooks get" not in tensors.stdout


def test_node_hooks_are_pinned_only_when_asked_for() -> None:
    spec = str(SPECS / "two_modules.yaml")
    assert "node hook" not in run_cli("walk", spec).stdout
    asked = run_cli("walk", spec, "--hook", "node").stdout
    assert "node hook of n2 grad_inputs[0]" in asked


def test_the_notebook_view_is_the_markdown_walk() -> None:
    """What Jupyter shows for explain()'s result (`_repr_markdown_`, no notebook server
    needed): the answer table and the pinned chain rule, with torch's numbers."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.Sigmoid())
    x = torch.randn(1, 3, requires_grad=True)
    shown = explain(model, x)._repr_markdown_()
    assert "## What each module's backward hooks get" in shown
    assert "| `0` | `grad_input` |" in shown
    assert "## Chain rule" in shown and "← legacy: `1.grad_input[0]`" in shown
    plain = x.detach().clone().requires_grad_()
    model(plain).sum().backward()
    assert plain.grad is not None
    # Sequential's forward names its argument `input`; its gradient is pinned where torch
    # computes it, with the value plain torch gives.
    (line,) = [line for line in shown.splitlines() if "`tensor hook on input`" in line]
    assert_printed(line.split(" = ")[-1].split(" ✓")[0], plain.grad.flatten().tolist(),
                   "the input's gradient")


def test_a_pass_on_another_graph_is_said_once_not_pinned() -> None:
    """Self-attention under full hooks computes another graph than the chain rule's: none of
    the full pass's arguments is pinned, and the view says so once."""
    torch.manual_seed(0)
    result = explain(SelfAttention(), torch.randn(2, 3, 4, requires_grad=True))
    full = next(item for item in result.walk.passes if item.mode == "full")
    assert full.graph_changed
    # Node hooks are shown only when asked for (--hook node): not counted by default.
    labelled = [arg for event in full.events for arg in event.args
                if arg.meaning is not None and arg.value is not None
                and arg.meaning.kind != "zero" and event.hook not in ("node", "node_pre")]
    assert labelled and all(arg.pin is None for arg in labelled)
    text = plain_text(result.text())
    assert f"the full pass's {len(labelled)} hook arguments are on another graph" in text
    # The legacy pass's arguments are pinned as everywhere else.
    legacy = [arg for item in result.walk.passes if item.mode == "legacy"
              for event in item.events for arg in event.args if arg.pin is not None]
    assert legacy
    assert "← legacy: " in text and "full: " not in text.split("chain rule of run 1")[1]


def test_a_matrix_seed_keeps_its_rows_whole() -> None:
    """backward(gradient=V) with a 4x4 V too wide for one line: one row of V per line."""
    seed = [[round(0.123457 * (row + 1) + 0.011 * column, 6) for column in range(4)]
            for row in range(4)]
    text = ("name: matrix_seed\ninputs:\n  x: {randn: [4, 4], requires_grad: true}\n"
            "forward:\n  - \"y = tanh(x)\"\n"
            f"backward:\n  - {{of: y, gradient: {seed}}}\n")
    session = capture_text(text, "matrix_seed.yaml")
    shown = plain_text(walk_text(session.walk))
    lines = shown.splitlines()
    start = next(number for number, line in enumerate(lines)
                 if line.startswith("seed gradient v ="))
    rows = lines[start + 1:start + 5]
    for line, row in zip(rows, seed, strict=True):
        assert_printed(line, row, "a row of the seed")
    assert all(len(line) <= 100 for line in lines)


def test_a_failed_label_is_loud_at_its_step() -> None:
    """A pinned argument whose check failed says so where it is pinned, in text and markdown."""
    walk = captured("two_modules.yaml").walk
    legacy = walk.passes[0]
    number, event = next((number, event) for number, event in enumerate(legacy.events)
                         if event.hook == "backward" and event.target == "module2")
    arg = event.args[0]
    assert arg.check is not None and arg.pin is not None
    broken = replace(arg, check=replace(arg.check, verified=False))
    events = list(legacy.events)
    events[number] = replace(event, args=(broken, *event.args[1:]))
    walk = replace(walk, passes=(replace(legacy, events=tuple(events)), *walk.passes[1:]))
    text = plain_text(walk_text(walk))
    assert "module2.grad_input[0] ✗ FAILED" in " ".join(text.split())
    assert "`module2.grad_input[0]` **✗ FAILED**" in walk_markdown(walk)


def test_one_step_left_out_is_one_step() -> None:
    """It read "(1 steps with none of the shown hook arguments left out)"."""
    from gradexplain.records.pinned import hidden_steps_text

    assert hidden_steps_text(1).startswith("1 step with none")
    assert hidden_steps_text(2).startswith("2 steps with none")
    assert hidden_steps_text(1200).startswith("1,200 steps")
