"""`gradexplain walk SPEC --format json` on every spec in specs/, against plain PyTorch.

Every spec walks in both passes with every check verified; each pass's `grads`, and every labelled
gradient whose tensor the test can name, equal what torch computes here from the spec's own numbers
(tests/helpers/specoracles.py); and the articles' numbers of matrix_chain, vector_backward and
multi_output. The acceptance numbers of two_modules are in test_label_two_modules.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from tests.helpers.cli import SPECS
from tests.helpers.specoracles import (
    ORACLES,
    label_mismatches,
    multi_output_seeds,
    plain_matrix_chain,
)
from tests.helpers.walkjson import (
    MODES,
    SCHEMA,
    Walk,
    arg,
    args_named,
    assert_grad_arg,
    assert_grads,
    assert_meaning,
    assert_value,
    assert_verified,
    contract_problems,
    describe,
    get,
    run_all,
)

SPEC_FILES = sorted(SPECS.glob("*.yaml"))


def spec_key(path: Path) -> str:
    return f"specs/{path.name}"


@pytest.fixture(scope="module")
def walks() -> dict[str, Walk | AssertionError]:
    """Every spec in specs/ walked once (side by side), shared by all tests of this file."""
    return run_all([spec_key(path) for path in SPEC_FILES])


# --- every spec --------------------------------------------------------------------------------


def test_there_are_specs_and_oracles_for_the_acceptance_ones() -> None:
    names = {path.name for path in SPEC_FILES}
    assert {"two_modules.yaml", "matrix_chain.yaml", "vector_backward.yaml"} <= names
    assert set(ORACLES) <= names


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda path: path.stem)
def test_every_spec_walks_with_every_check_verified(
        walks: dict[str, Walk | AssertionError], path: Path) -> None:
    walk_ = get(walks, spec_key(path))
    assert walk_.doc.get("schema") == SCHEMA
    assert walk_.doc.get("torch") == torch.__version__
    assert str(walk_.doc.get("spec", "")).endswith(path.name)
    assert [item.get("mode") for item in walk_.passes()] == list(MODES)
    problems = contract_problems(walk_.doc)
    assert problems == [], "\n".join(problems[:40])
    assert walk_.code == 0, f"exit {walk_.code} with every check verified\n{walk_.stderr[-2000:]}"
    for mode in MODES:
        events = walk_.events(mode)
        assert events, f"[{mode}] no events"
        assert [event["seq"] for event in events] == sorted(event["seq"] for event in events)
        assert len({event["seq"] for event in events}) == len(events)
        assert any(event["phase"] == "backward" for event in events)
        checked = [item for event in events for item in event["args"]
                   if item.get("check") is not None]
        assert checked, f"[{mode}] not a single checked argument"
    # Legacy and full module hooks never share a pass.
    assert not walk_.events("legacy", "full_backward") and not walk_.events(
        "legacy", "full_backward_pre")
    assert not walk_.events("full", "backward")


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_grads_match_plain_torch(walks: dict[str, Walk | AssertionError], name: str) -> None:
    oracle = ORACLES[name]()
    walk_ = get(walks, f"specs/{name}")
    if not oracle.grads_checked:
        assert_grads(walk_, oracle.grads)
        return
    for mode, names in oracle.grads_checked.items():
        assert_grads(walk_, oracle.grads, modes=(mode,), names=names)


@pytest.mark.parametrize("name", sorted(set(ORACLES) - {"multi_output.yaml"}))
def test_labelled_gradients_match_plain_torch(walks: dict[str, Walk | AssertionError],
                                              name: str) -> None:
    oracle = ORACLES[name]()
    walk_ = get(walks, f"specs/{name}")
    for mode in oracle.modes:
        problems, seen = label_mismatches(walk_, oracle, mode)
        assert problems == [], "\n".join(problems[:30])
        missing = oracle.must_see - seen
        assert not missing, f"[{mode}] no argument is labelled ∂{oracle.of}/∂ {sorted(missing)}"


# --- matrix_chain, vector_backward, multi_output -------------------------------------------------


def test_matrix_chain_grads_are_the_articles(walks: dict[str, Walk | AssertionError]) -> None:
    walk_ = get(walks, "specs/matrix_chain.yaml")
    for mode in MODES:
        grads = walk_.grads(mode)
        assert grads["w_1"] == [[6.0, 12.0], [5.0, 10.0]]
        assert grads["w_2"] == [[5.0, 11.0], [5.0, 11.0]]
        assert grads["inp"] is None


def test_matrix_chain_top_level_legacy_hook_sits_on_the_sum(
        walks: dict[str, Walk | AssertionError]) -> None:
    walk_ = get(walks, "specs/matrix_chain.yaml")
    oracle = plain_matrix_chain()
    event = walk_.event("legacy", "backward", "")
    assert event["node"] == "SumBackward0"
    (item,) = args_named(event, "grad_input")
    assert_grad_arg(item, oracle.named["y_2"], of="output", wrt="y_2")
    mv = walk_.events("legacy", "node", node="MvBackward0")
    assert len(mv) == 2
    firsts = {arg(event, "grad_inputs[0]")["meaning"]["wrt"] for event in mv}
    assert firsts == {"w_1", "w_2"}


def test_matrix_chain_full_top_level_hook_has_zeros_for_inp(
        walks: dict[str, Walk | AssertionError]) -> None:
    """The top-level model takes the spec's inputs (inp, w_1, w_2); inp does not require grad,
    so its full-hook entry is a zeros tensor that still names inp (torch-hook-facts B06)."""
    walk_ = get(walks, "specs/matrix_chain.yaml")
    oracle = plain_matrix_chain()
    event = walk_.event("full", "full_backward", "")
    grad_inp, grad_w1, grad_w2 = args_named(event, "grad_input")
    assert_value(grad_inp, torch.zeros(2), describe(event))
    assert_meaning(grad_inp, of="output", wrt="inp", what=describe(event))
    assert_verified(grad_inp, describe(event))
    assert_grad_arg(grad_w1, oracle.named["w_1"], of="output", wrt="w_1", what=describe(event))
    assert_grad_arg(grad_w2, oracle.named["w_2"], of="output", wrt="w_2", what=describe(event))


def test_vector_backward_accumulates_twice(walks: dict[str, Walk | AssertionError]) -> None:
    walk_ = get(walks, "specs/vector_backward.yaml")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(2).requires_grad_(True)
    seen: list[torch.Tensor] = []
    x.register_post_accumulate_grad_hook(lambda leaf: seen.append(leaf.grad.clone()))
    y = x * 3
    for _ in range(2):
        y.backward(torch.tensor([100.0, 0.1]), retain_graph=True)
    assert torch.allclose(seen[-1], torch.tensor([600.0, 0.6]))
    for mode in MODES:
        posts = walk_.events(mode, "post_accumulate_grad", "x")
        assert len(posts) == len(seen) == 2
        for event, want in zip(posts, seen, strict=True):
            assert_value(arg(event, "tensor"), want, f"[{mode}] {describe(event)}")
        hooks = walk_.events(mode, "tensor", "x")
        assert len(hooks) == 2
        for event in hooks:
            assert_grad_arg(arg(event, "grad"), torch.tensor([300.0, 0.3]), of="y", wrt="x")


def test_multi_output_grad_calls_reach_x_temp_in_order(
        walks: dict[str, Walk | AssertionError]) -> None:
    walk_ = get(walks, "specs/multi_output.yaml")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.rand(10, 2).requires_grad_(True)
        fc1, fc2 = nn.Linear(2, 10), nn.Linear(10, 3)
    pred = fc2(torch.tanh(fc1(x)))
    wanted = [torch.autograd.grad(pred, x, seed, retain_graph=True)[0]
              for seed in multi_output_seeds(pred)]
    for mode in MODES:
        events = walk_.events(mode, "tensor", "x_temp")
        assert len(events) == len(wanted), f"[{mode}] {len(events)} tensor hook calls on x_temp"
        for event, want in zip(events, wanted, strict=True):
            assert_grad_arg(arg(event, "grad"), want, of="pred", wrt="x_temp",
                            what=f"[{mode}] {describe(event)}")
        assert not walk_.events(mode, "post_accumulate_grad")
