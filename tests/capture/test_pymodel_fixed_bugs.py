"""Python models: the bugs found while writing the Python-model tests, fixed, each with the test
that reproduces it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from gradexplain.api import Explanation, explain
from gradexplain.errors import GradexplainError
from tests.helpers import pymodels
from tests.helpers.pycli import (
    CLI,
    PYMODELS,
    assert_one_error_line,
    walk_json,
    without_spec,
)
from tests.helpers.pyoracle import explained, seeded, torch_model


@pytest.fixture(scope="module")
def mlp() -> Explanation:
    return explained("mlp")


def test_explain_walk_name_has_no_leading_colon(mlp: Explanation) -> None:
    assert not mlp.walk.name.startswith(":"), mlp.walk.name
    assert mlp.report().startswith("# gradexplain report: MLP")


def test_forward_raising_assertion_is_bad_input(cli: CLI) -> None:
    result = cli("walk", f"{PYMODELS}:make_asserts", "--input", "4x5")
    assert_one_error_line(result, ["its forward raised AssertionError"])


def test_dropout_in_training_mode_walks_cleanly() -> None:
    result = explain(torch_model(pymodels.make_dropout), (4, 3))
    assert result.failures() == []


def test_unnamed_tensor_under_a_transpose() -> None:
    result = explain(torch_model(pymodels.make_transposed_product), (3, 4))
    assert result.failures() == []


def test_factory_is_seeded_even_after_random_imports(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "noisy.py").write_text(
        "import torch\nfrom tests.helpers.pymodels import make_mlp\n\nNOISE = torch.randn(3)\n",
        encoding="utf-8")
    noisy = walk_json(cli, f"{tmp_path}/noisy.py:make_mlp", "--input", "4x3")
    assert without_spec(noisy) == without_spec(
        walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3"))


def test_explain_factory_matches_the_command_line(cli: CLI) -> None:
    here = walk_json(cli, f"{PYMODELS}:make_mlp", "--input", "4x3")
    with seeded(1234):
        rng = torch.get_rng_state()
        result = explain(pymodels.make_mlp, pymodels.MLP_INPUT).json()
        assert torch.equal(rng, torch.get_rng_state()), "explain() moved the caller's RNG"
    assert without_spec(result) == without_spec(here)


class _GradientPenalty(nn.Module):
    """A forward that backpropagates itself: the gradient of its output w.r.t. its input,
    squared, added to the output (a gradient penalty)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x).tanh()
        (slope,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        out: torch.Tensor = y.sum() + slope.pow(2).sum()
        return out


def test_a_forward_that_backpropagates_is_refused_saying_so() -> None:
    """The hooks of a backward inside the forward fire before the traced graph is made: the
    refusal says that, not a reentrant checkpoint's cause (which it said before)."""
    x = torch.randn(2, 4, requires_grad=True)
    _GradientPenalty()(x).backward()  # plain torch runs it
    with pytest.raises(GradexplainError) as refused:
        explain(_GradientPenalty(), x.detach().requires_grad_())
    message = str(refused.value)
    assert "during the forward" in message and "checkpoint" not in message
