"""walk's own machinery: checks that can fail, the derivation against plain torch, the filters,
the renderers and the command line. (Labels per case family: test_walk_cases.py.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gradexplain.capture.checks import check
from gradexplain.capture.label import Site, label_pass
from gradexplain.capture.pipeline import walk
from gradexplain.capture.replay import Replay
from gradexplain.capture.trace import trace_both
from gradexplain.language import load_spec
from gradexplain.records.numbers import fmt
from gradexplain.records.trace import TensorValue
from gradexplain.records.walk import Walk
from gradexplain.render.json_walk import walk_json
from gradexplain.render.select import select
from tests.articles import MyModule, MyModule2
from tests.conftest import SPECS, run_cli

TWO_MODULES = SPECS / "two_modules.yaml"


@pytest.fixture(scope="module")
def two_modules() -> Walk:
    return walk(load_spec(TWO_MODULES), "specs/two_modules.yaml")


def article_grads() -> dict[str, torch.Tensor]:
    """The article's model in plain torch, with the spec's numbers: dz/d(every tensor)."""
    x = torch.tensor(5.0, requires_grad=True)
    first, second = MyModule(), MyModule2()
    with torch.no_grad():
        first.p.copy_(torch.tensor([3.0, 4.0]))
        second.l.weight.copy_(torch.tensor([[-0.1490, 0.0568]]))
    y = first(x)
    t = second.l(y)
    z = torch.sigmoid(t)
    names = {"x": x, "module.p": first.p, "module2.l.weight": second.l.weight, "y": y, "t": t}
    grads = torch.autograd.grad(z, list(names.values()))
    return dict(zip(names, grads, strict=True))


def test_check_fails_on_a_wrong_value_and_a_wrong_shape() -> None:
    right = torch.tensor([0.5, -1.0])
    assert check(TensorValue((2,), "float32", [0.5, -1.0]), right).verified
    wrong = check(TensorValue((2,), "float32", [0.5, -0.9]), right)
    assert not wrong.verified and wrong.max_abs_err == pytest.approx(0.1)
    assert not check(TensorValue((1, 2), "float32", [[0.5, -1.0]]), right).verified
    assert not check(None, right).verified


def test_a_wrong_label_fails_its_check() -> None:
    """Swap two labels' sites (dz/dp and dz/dx) and the hook-free run must disagree."""
    spec = load_spec(TWO_MODULES)
    legacy, _ = trace_both(spec)
    view, events = label_pass(legacy)
    replay = Replay(spec, legacy, [view.name_of(node) for node in view.order])
    mul = next(item for item in events
               if item.event.hook == "backward" and item.event.target == "module")
    site_p, site_x = mul.labels[0].site, mul.labels[1].site
    assert isinstance(site_p, Site) and isinstance(site_x, Site)
    value_p = mul.event.args[0].value
    assert value_p is not None
    assert check(value_p, replay.expected(site_p, value_p.shape)).verified
    assert not check(value_p, replay.expected(site_x, value_p.shape)).verified
    weight = next(item for item in events if item.event.hook == "tensor"
                  and item.event.target == "module2.l.weight")
    weight_value = weight.event.args[0].value
    weight_site = weight.labels[0].site
    assert weight_value is not None and weight_site is not None
    assert check(weight_value, replay.expected(weight_site, weight_value.shape)).verified
    assert not check(weight_value, replay.expected(replace(weight_site, transposes=1),
                                                   weight_value.shape)).verified


def test_derivation_matches_plain_torch(two_modules: Walk) -> None:
    expected = article_grads()
    (derivation,) = two_modules.derivations
    assert derivation.of == "z" and derivation.kind == "backward"
    nodes = [line.node for line in derivation.lines]
    assert nodes[0] == "SigmoidBackward0"
    assert nodes.index("MulBackward0") > nodes.index("MmBackward0")
    sigmoid = derivation.lines[0]
    (term,) = sigmoid.terms
    assert term.wrt == "module2.t" and "σ" in term.local
    assert term.value is not None
    assert torch.allclose(torch.tensor(term.value.value), expected["t"])
    mul = next(line for line in derivation.lines if line.node == "MulBackward0")
    by_name = {item.wrt: item for item in mul.terms}
    assert set(by_name) == {"module.p", "x"}
    for name in ("module.p", "x"):
        value = by_name[name].value
        assert value is not None
        assert torch.allclose(torch.tensor(value.value), expected[name])
        result = by_name[name].check
        assert result is not None and result.verified


def test_final_grads_match_plain_torch(two_modules: Walk) -> None:
    expected = article_grads()
    for walk_pass in two_modules.passes:
        grads = {grad.name: grad for grad in walk_pass.grads}
        for name in ("x", "module.p", "module2.l.weight"):
            value = grads[name].value
            assert value is not None
            assert torch.allclose(torch.tensor(value.value), expected[name])
            result = grads[name].check
            assert result is not None and result.verified


def test_every_spec_walks_with_every_check_verified() -> None:
    for path in sorted(SPECS.glob("*.yaml")):
        result = walk(load_spec(path), str(path))
        assert result.failures() == [], path.name
        checked = [arg for walk_pass in result.passes for event in walk_pass.events
                   for arg in event.args if arg.check is not None]
        assert checked, path.name


def test_select_keeps_what_the_filters_ask(two_modules: Walk) -> None:
    only = select(two_modules, ["full"], "module2", ["full_backward"])
    (full,) = only.passes
    assert full.mode == "full"
    assert {event.target for event in full.events} == {"module2", "module2.l",
                                                        "module2.activation"}
    assert {event.hook for event in full.events} == {"full_backward"}
    tensors = select(two_modules, ["legacy"], "module2", ["tensor"])
    assert {event.target for event in tensors.passes[0].events} == {"module2.t",
                                                                    "module2.l.weight"}


def test_json_has_the_contract_keys(two_modules: Walk) -> None:
    data = walk_json(two_modules)
    # The contract's keys first, then what walk adds beyond them.
    assert list(data) == ["schema", "torch", "spec", "passes", "runs", "lessons"]
    assert data["schema"] == "gradexplain.walk/1"
    for walk_pass in data["passes"]:
        assert list(walk_pass) == ["mode", "events", "grads"]
        for event in walk_pass["events"]:
            assert list(event) == ["seq", "phase", "hook", "target", "node", "args"]
            for arg in event["args"]:
                assert list(arg) == ["name", "shape", "value", "meaning", "check"]
                if arg["meaning"] is not None:
                    assert list(arg["meaning"]) == ["of", "wrt", "aliases", "layout", "text",
                                                    "latex"]
    json.dumps(data, allow_nan=False)


def test_fmt_is_one_format() -> None:
    assert [fmt(0.187463641166687), fmt(-0.041204508394002914), fmt(6.0), fmt(-0.0)] == [
        "0.18746", "-0.041205", "6", "0"]


def test_cli_text_output_at_100_columns_without_colour() -> None:
    result = run_cli("walk", str(TWO_MODULES))
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert all(line == line.rstrip() for line in lines)
    assert "\x1b[" not in result.stdout
    assert "backward module2 on SigmoidBackward0" in result.stdout
    assert "checks verified against a hook-free run" in lines[-1]


def test_cli_json_filters_and_bad_options(tmp_path: Path) -> None:
    result = run_cli("walk", str(TWO_MODULES), "--format", "json", "--pass", "legacy",
                     "--hook", "backward")
    assert result.code == 0, result.stderr
    data = json.loads(result.stdout)
    (legacy,) = data["passes"]
    assert [event["target"] for event in legacy["events"]] == [
        "module2.activation", "module2", "", "module2.l", "module"]
    bad = run_cli("walk", str(TWO_MODULES), "--module", "nowhere")
    assert bad.code == 2 and "no such module" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_cli("walk", str(tmp_path / "none.yaml"))
    assert missing.code == 2 and "Traceback" not in missing.stderr


def test_cli_exit_1_and_a_loud_line_when_a_check_fails(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A failed check is never hidden: exit 1 and a line naming it."""
    import gradexplain.capture.checks as checks_module
    from gradexplain import cli

    real_check: Callable[..., object] = checks_module.check

    def pessimist(value: TensorValue | None, expected: torch.Tensor) -> object:
        return real_check(value, expected + 1.0)

    for stage in ("gradexplain.capture.passes", "gradexplain.capture.derive"):
        monkeypatch.setattr(f"{stage}.check", pessimist)
    monkeypatch.setattr("sys.argv", ["gradexplain", "walk", str(TWO_MODULES)])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "checks FAILED" in out and "✗" in out


def test_a_check_on_tiny_gradients_is_not_vacuous() -> None:
    """Deep models' early gradients can be 1e-17 throughout: the check is relative to the
    tensor's scale, so another tensor of the same tininess does not pass for it, while the
    same values (and exact zeros) still do."""
    expected = torch.tensor([1e-17, -2e-17, 3e-17])
    same = TensorValue((3,), "float32", expected.tolist())
    other = TensorValue((3,), "float32", [2e-17, -1e-17, 1e-17])
    assert check(same, expected).verified
    assert not check(other, expected).verified
    assert check(TensorValue((2,), "float32", [0.0, 0.0]), torch.zeros(2)).verified
    assert not check(TensorValue((2,), "float32", [0.0, 1e-20]), torch.zeros(2)).verified
