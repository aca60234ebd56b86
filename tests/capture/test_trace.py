"""The tracer against plain PyTorch: the article's classes, hooked by hand in the test, must see the
same module and tensor hook calls, in the same order, with the same values; hooks never outlive a
trace; torch's warnings become data."""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import pytest
import torch
from torch import nn

from gradexplain.capture.build import build
from gradexplain.capture.trace import trace
from gradexplain.errors import SpecRunError
from gradexplain.language import load_spec, load_spec_text
from gradexplain.records.trace import Mode, PassTrace
from tests.helpers.articles import TwoModules, legacy_hook_warnings
from tests.helpers.capture import trace_both
from tests.helpers.cli import SPECS
from tests.helpers.messages import raised_by

Call = tuple[str, str, list[Any]]


def values(items: Any) -> list[Any]:
    return [None if item is None else item.detach().tolist() for item in items]


def same_values(ours: Any, theirs: Any) -> bool:
    """The same nesting, None in the same places, and numbers equal up to float32 rounding:
    the plain run is the test's own torch code, not the build gradexplain ran, so another CPU
    may differ in the last bit."""
    if ours is None or theirs is None:
        return ours is None and theirs is None
    if isinstance(ours, list) or isinstance(theirs, list):
        return (isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs)
                and all(same_values(a, b) for a, b in zip(ours, theirs, strict=True)))
    return math.isclose(float(ours), float(theirs), rel_tol=1e-6, abs_tol=1e-9)


def plain_module_calls(mode: str) -> list[Call]:
    """Every module hook call of the article's example, hooked by hand."""
    calls: list[Call] = []
    top = TwoModules()
    handles = []
    for path, module in top.named_modules():
        def pre(m: nn.Module, inputs: Any, path: str = path) -> None:
            calls.append(("forward_pre", path, values(inputs)))

        def fwd(m: nn.Module, inputs: Any, output: Any, path: str = path) -> None:
            calls.append(("forward", path, values(inputs) + values([output])))

        def back(m: nn.Module, gi: Any, go: Any, path: str = path, kind: str = "") -> None:
            calls.append((kind, path, values(gi) + values(go)))

        def back_pre(m: nn.Module, go: Any, path: str = path) -> None:
            calls.append(("full_backward_pre", path, values(go)))

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(fwd)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mode == "legacy":
                handles.append(module.register_backward_hook(
                    lambda m, gi, go, b=back: b(m, gi, go, kind="backward")))
            else:
                handles.append(module.register_full_backward_pre_hook(back_pre))
                handles.append(module.register_full_backward_hook(
                    lambda m, gi, go, b=back: b(m, gi, go, kind="full_backward")))
    x = torch.tensor(5.0, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = top(x)
    z.backward()
    for handle in handles:
        handle.remove()
    return calls


MODULE_HOOKS = {"forward_pre", "forward", "backward", "full_backward_pre", "full_backward"}


def traced_module_calls(result: PassTrace) -> list[Call]:
    return [(event.hook, event.target,
             [None if arg.value is None else arg.value.value for arg in event.args])
            for event in result.events if event.hook in MODULE_HOOKS]


@pytest.mark.parametrize("mode", ["legacy", "full"])
def test_module_hook_calls_match_plain_torch(mode: Mode) -> None:
    spec = load_spec(SPECS / "two_modules.yaml")
    traced = traced_module_calls(trace(build(spec), mode))
    plain = plain_module_calls(mode)
    assert [call[:2] for call in traced] == [call[:2] for call in plain]
    for ours, theirs in zip(traced, plain, strict=True):
        assert same_values(ours[2], theirs[2]), (ours, theirs)


def test_legacy_hooks_of_module2_sit_on_the_sigmoid() -> None:
    legacy, full = trace_both(load_spec(SPECS / "two_modules.yaml"))
    nodes = {node.id: node.name for node in legacy.graph}
    where = {call.module: nodes[call.legacy_node] for call in legacy.calls
             if call.legacy_node is not None}
    assert where == {"module": "MulBackward0", "module2.l": "SqueezeBackward4",
                     "module2.activation": "SigmoidBackward0", "module2": "SigmoidBackward0",
                     "": "SigmoidBackward0"}
    # In the full pass the caller sees BackwardHookFunction views instead.
    full_nodes = {node.id: node.name for node in full.graph}
    full_z, legacy_z = full.named("z"), legacy.named("z")
    assert full_z is not None and full_z.node is not None
    assert legacy_z is not None and legacy_z.node is not None
    assert full_nodes[full_z.node] == "BackwardHookFunctionBackward"
    assert nodes[legacy_z.node] == "SigmoidBackward0"


def test_tensor_and_leaf_hooks_follow_torchs_order() -> None:
    # Plain torch: tensor hooks on x, p, W, y, t, z and post-accumulate hooks on the leaves,
    # in the article's code without module hooks; our legacy pass must show the same subsequence.
    log: list[tuple[str, str, Any]] = []
    top = TwoModules()
    x = torch.tensor(5.0, requires_grad=True)
    leaves = {"x": x, "module.p": top.module.p, "module2.l.weight": top.module2.l.weight}
    for name, leaf in leaves.items():
        leaf.register_hook(lambda g, n=name: log.append(("tensor", n, g.tolist())))
        leaf.register_post_accumulate_grad_hook(
            lambda t, n=name: log.append(("post_accumulate_grad", n, t.grad.tolist())))
    y = top.module.p * x
    t = top.module2.l(y)
    z = torch.sigmoid(t)
    for name, tensor in (("y", y), ("module2.t", t), ("z", z)):
        tensor.register_hook(lambda g, n=name: log.append(("tensor", n, g.tolist())))
    z.backward()
    legacy = trace(build(load_spec(SPECS / "two_modules.yaml")), "legacy")
    ours = [(event.hook, event.target, event.args[0].value.value)  # type: ignore[union-attr]
            for event in legacy.events if event.hook in ("tensor", "post_accumulate_grad")]
    assert [item[:2] for item in ours] == [item[:2] for item in log]
    for mine, theirs in zip(ours, log, strict=True):
        assert same_values(mine[2], theirs[2]), (mine, theirs)


def test_node_hooks_come_in_pairs_around_each_node() -> None:
    modes: tuple[Mode, ...] = ("legacy", "full")
    for mode in modes:
        result = trace(build(load_spec(SPECS / "two_modules.yaml")), mode)
        order = [(event.hook, event.target) for event in result.events
                 if event.hook in ("node_pre", "node")]
        assert {target for _, target in order} == {node.id for node in result.graph}
        for node in result.graph:
            assert order.count(("node_pre", node.id)) == 1
            assert order.count(("node", node.id)) == 1
            assert order.index(("node_pre", node.id)) < order.index(("node", node.id))


def test_grads_match_plain_backward() -> None:
    top = TwoModules()
    x = torch.tensor(5.0, requires_grad=True)
    top(x).backward()
    plain = {"x": x.grad, "module.p": top.module.p.grad,
             "module2.l.weight": top.module2.l.weight.grad}
    for result in trace_both(load_spec(SPECS / "two_modules.yaml")):
        got = dict(result.grads)
        assert set(got) == set(plain)
        for name, grad in plain.items():
            assert grad is not None
            value = got[name]
            assert value is not None and same_values(value.value, grad.tolist()), (name, value)


def test_backward_twice_accumulates_and_grad_calls_leave_grad_alone() -> None:
    legacy, _ = trace_both(load_spec(SPECS / "vector_backward.yaml"))
    assert [run.kind for run in legacy.runs] == ["backward", "backward"]
    posts = [(event.run, event.args[0].value.value)  # type: ignore[union-attr]
             for event in legacy.events if event.hook == "post_accumulate_grad"]
    assert [run for run, _ in posts] == [1, 2]
    assert posts[0][1] == pytest.approx([300.0, 0.3])
    assert posts[1][1] == pytest.approx([600.0, 0.6])
    multi, _ = trace_both(load_spec(SPECS / "multi_output.yaml"))
    assert [run.kind for run in multi.runs] == ["grad"] * 4
    assert not any(event.hook == "post_accumulate_grad" for event in multi.events)
    assert all(grad is None for _, grad in multi.grads)


def hooks_left(built: Any) -> list[str]:
    left = []
    for path, module in built.model.named_modules():
        for attribute in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                          "_backward_pre_hooks"):
            if getattr(module, attribute):
                left.append(f"{path}.{attribute}")
    for name, leaf in built.leaves().items():
        if leaf._backward_hooks or getattr(leaf, "_post_accumulate_grad_hooks", None):
            left.append(name)
    return left


def test_hooks_are_removed_after_a_trace() -> None:
    built = build(load_spec(SPECS / "two_modules.yaml"))
    trace(built, "full")
    assert hooks_left(built) == []


def test_hooks_are_removed_when_the_forward_fails() -> None:
    spec = load_spec_text(
        "inputs:\n  idx: {value: [0, 7], dtype: int64}\n"
        "modules:\n  m:\n    layers:\n"
        "      emb: {Embedding: {num_embeddings: 5, embedding_dim: 2}}\n"
        "    forward: {args: [i], steps: ['e = emb(i)']}\n"
        "forward: ['e = m(idx)', 's = sum(e)']\nbackward: s\n")
    built = build(spec)
    # torch's own words for the lookup, said by torch here: gradexplain passes them on.
    torch_says = raised_by(lambda: nn.Embedding(5, 2)(torch.tensor([0, 7])))
    with pytest.raises(SpecRunError, match=re.escape(torch_says)):
        trace(built, "legacy")
    assert hooks_left(built) == []
    # The check above can see hooks: one registered by hand is reported.
    handle = built.model.register_forward_hook(lambda *args: None)
    assert hooks_left(built) == ["._forward_hooks"]
    handle.remove()


def test_warnings_are_data_not_output(recwarn: pytest.WarningsRecorder) -> None:
    legacy, full = trace_both(load_spec(SPECS / "two_modules.yaml"))
    assert len(recwarn) == 0
    assert {warning.category for warning in legacy.warnings} == {"FutureWarning"}
    # What torch itself warns for the same hooks on the article's model, message for message.
    torch_says = legacy_hook_warnings()
    assert sorted((w.category, w.message) for w in legacy.warnings) == sorted(torch_says)
    assert full.warnings == ()
    # Each legacy warning follows the forward event of the module it belongs to.
    modules = {legacy.events[w.after_seq].target for w in legacy.warnings
               if w.after_seq is not None}
    assert modules == {"module", "module2.l", "module2", ""}


def test_large_tensors_are_summarised_at_record_time() -> None:
    spec = load_spec_text("inputs:\n  x: {randn: [200, 100], requires_grad: true}\n"
                          "forward: ['y = x * 2', 's = sum(y)']\nbackward: s\n")
    built = build(spec)
    plain = built.input("x").detach().clone()
    result = trace(built, "legacy")
    grad_event = next(event for event in result.events
                      if event.hook == "tensor" and event.target == "x")
    value = grad_event.args[0].value
    assert value is not None and value.value is None and value.summary is not None
    assert value.summary.max == pytest.approx(2.0) and value.summary.min == pytest.approx(2.0)
    forward = next(event for event in result.events if event.hook == "forward_pre")
    summary = forward.args[0].value.summary  # type: ignore[union-attr]
    assert summary is not None
    assert summary.max == pytest.approx(float(plain.max()))
    assert summary.norm == pytest.approx(float(plain.double().norm()))
