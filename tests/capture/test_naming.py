"""One name for each tensor in one walk: the chain rule names an unnamed tensor exactly as the
hook timelines label it (records/names.py, GraphView.synthetic_name)."""

from __future__ import annotations

import torch

from tests.helpers.capture import capture_text

SPEC = """
name: unnamed_product
seed: 0
inputs:
  x: {randn: [3]}
  w: {randn: [3], requires_grad: true}
forward:
  - "loss = sum(w * x)"
backward: [loss]
"""


def test_the_chain_rule_names_an_unnamed_tensor_as_the_labels_do() -> None:
    session = capture_text(SPEC, "unnamed_product.yaml")
    walk = session.walk
    # Plain torch: the product w * x has no name, and its gradient under sum is ones.
    w = torch.randn(3, requires_grad=True)
    product = w * torch.randn(3)
    (grad,) = torch.autograd.grad(product.sum(), product)
    mul_lines = [line for derivation in walk.derivations for line in derivation.lines
                 if line.node == "MulBackward0"]
    assert len(mul_lines) == 1
    chain_rule_name = mul_lines[0].output
    # The Node hook on MulBackward0 receives the product's gradient as grad_outputs[0].
    labelled = {arg.meaning.wrt for walk_pass in walk.passes for event in walk_pass.events
                if event.hook == "node_pre" and event.node == "MulBackward0"
                for arg in event.args if arg.meaning is not None}
    assert labelled == {chain_rule_name}
    assert chain_rule_name == "loss:mul"
    upstream = mul_lines[0].upstream
    assert upstream is not None and upstream.value is not None
    torch.testing.assert_close(torch.tensor(upstream.value), grad)
