"""`build()` on every spec in specs/: deterministic, and the caller's global RNG left alone.

The article specs are compared with plain PyTorch in test_build_against_articles.py, the lesson
specs of issue 5 by their lessons' tests; the last test makes sure specs/ holds no spec that is
in neither list.
"""

from __future__ import annotations

import pytest
import torch

from gradexplain.capture.build import build
from gradexplain.language import load_spec
from tests.helpers.capture import run_forward
from tests.helpers.cli import SPECS

SPEC_NAMES = (
    "two_modules",
    "matrix_chain",
    "vector_backward",
    "add_hooks",
    "mul_param",
    "multi_output",
    "cnn_hooks",
    "embedding",
    "ddp_hooks",  # issue 21: tested under --ranks against plain torch in tests/distributed/
)
# The lesson specs of issue 5, each tested against plain torch by its lesson's tests.
LESSON_SPECS = (
    "scalar_only",
    "second_backward",
    "no_grad_backward",
    "column_backward",
    "intervene_legacy",
    "wrong_replacement",
    "cam_capture",
)


@pytest.mark.parametrize("name", SPEC_NAMES + LESSON_SPECS)
def test_build_is_deterministic_and_keeps_global_rng(name: str) -> None:
    spec = load_spec(SPECS / f"{name}.yaml")
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    first = build(spec)
    after = torch.get_rng_state()
    assert torch.equal(before, after)
    torch.manual_seed(98765)  # a different caller state must not change what build() makes
    second = build(spec)

    one, two = first.leaves(), second.leaves()
    assert list(one) == list(two)
    assert len(one) >= 1
    for key in one:
        assert one[key] is not two[key]
        assert one[key].dtype == two[key].dtype, key
        assert torch.equal(one[key], two[key]), key
    out_one, _ = run_forward(first)
    out_two, _ = run_forward(second)
    assert torch.equal(out_one, out_two)


def test_specs_dir_has_exactly_the_tested_specs() -> None:
    assert sorted(path.stem for path in SPECS.glob("*.yaml")) == sorted(SPEC_NAMES + LESSON_SPECS)
