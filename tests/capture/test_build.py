"""The builder beyond forward values: bit-identical across processes, steps that torch refuses at
run time reported at their step, and the observer that names every value."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from gradexplain.capture.build import build, observe
from gradexplain.errors import SpecRunError
from gradexplain.language import load_spec, load_spec_text
from tests.helpers.capture import run_forward
from tests.helpers.cli import REPO, SPECS
from tests.helpers.messages import raised_by

ALL_SPECS = sorted(SPECS.glob("*.yaml"))

DIGESTS = """
import hashlib, sys
from gradexplain.capture.build import build
from gradexplain.language import load_spec
from tests.helpers.capture import run_forward
for path in sys.argv[1:]:
    built = build(load_spec(path))
    output, values = run_forward(built)
    digest = hashlib.sha256()
    for name, tensor in sorted(values.items()):
        digest.update(name.encode())
        # tolist() widens float32 to float64 exactly and repr() round-trips it: an exact
        # fingerprint of the values without numpy (which the project does not install).
        digest.update(repr(tensor.detach().tolist()).encode())
    print(path, digest.hexdigest())
"""


def digests_in_subprocess() -> list[str]:
    done = subprocess.run([sys.executable, "-c", DIGESTS, *map(str, ALL_SPECS)],
                          capture_output=True, text=True, cwd=REPO, timeout=300, check=True)
    return done.stdout.splitlines()


def test_two_processes_build_the_same_bits() -> None:
    first = digests_in_subprocess()
    second = digests_in_subprocess()
    assert len(first) == len(ALL_SPECS)
    assert first == second


def test_a_different_seed_gives_different_tensors(tmp_path: object) -> None:
    text = "seed: {seed}\ninputs:\n  x: {{randn: [4], requires_grad: true}}\n" \
           "forward: ['y = sum(x)']\nbackward: y\n"
    a = build(load_spec_text(text.format(seed=1))).input("x")
    b = build(load_spec_text(text.format(seed=2))).input("x")
    assert not torch.equal(a, b)
    # ...and the seed is what torch.manual_seed gives: randn right after seeding.
    torch.manual_seed(1)
    assert torch.equal(a.detach(), torch.randn(4))


def test_embedding_index_out_of_range_is_reported_at_its_step() -> None:
    # Inside a module (the top level's own lookups of indices written out are refused by the
    # checker, before anything runs): only torch finds these out of range.
    spec = load_spec_text(
        "inputs:\n  idx: {value: [0, 7], dtype: int64}\n"
        "modules:\n  m:\n    layers: {emb: {Embedding: {num_embeddings: 5, embedding_dim: 2}}}\n"
        "    forward: {args: [i], steps: ['e = emb(i)']}\n"
        "forward: ['e = m(idx)', 's = sum(e)']\nbackward: s\n",
        "emb.yaml",
    )
    built = build(spec)
    with pytest.raises(SpecRunError) as caught:
        run_forward(built)
    error = caught.value
    assert error.exit_code == 2
    assert error.one_line().startswith("emb.yaml:6:35: torch refused the step at "
                                       "modules.m.forward.steps[0]: ")
    assert "'e = emb(i)'" in error.message
    # torch's reason, as torch words it for the same lookup: passed on, not rewritten.
    assert raised_by(lambda: nn.Embedding(5, 2)(torch.tensor([0, 7]))) in error.message


def test_observer_sees_every_named_value_in_order() -> None:
    built = build(load_spec(SPECS / "two_modules.yaml"))
    seen: list[str] = []
    with observe(lambda name, value: seen.append(name)):
        built.model(*built.inputs)
    assert seen == ["x", "module.x", "module.y", "y", "module2.x", "module2.t", "module2.z", "z"]
    # Outside the block nothing is reported.
    built.model(*built.inputs)
    assert len(seen) == 8


def test_module_paths_are_spec_paths() -> None:
    built = build(load_spec(SPECS / "cnn_hooks.yaml"))
    names = [name for name, _ in built.model.named_modules()]
    assert names[:3] == ["", "net", "net.conv1"]
    assert "net.fc" in names
    assert set(built.leaves()) == {"image", "net.conv1.weight", "net.conv1.bias",
                                   "net.conv2.weight", "net.conv2.bias", "net.fc.weight",
                                   "net.fc.bias"}


def test_float64_spec_builds_float64() -> None:
    spec = load_spec_text(
        "dtype: float64\ninputs:\n  x: {randn: [3], requires_grad: true}\n"
        "layers:\n  l: {Linear: {in_features: 3, out_features: 2}}\n"
        "forward: ['y = l(x)', 's = sum(y)']\nbackward: s\n"
    )
    built = build(spec)
    output, _ = run_forward(built)
    assert built.input("x").dtype == torch.float64
    assert dict(built.model.named_parameters())["l.weight"].dtype == torch.float64
    assert output.dtype == torch.float64


def test_fingerprint_sees_the_last_bit() -> None:
    # The determinism test fingerprints values with repr(tolist()); one ulp must change it.
    one = torch.tensor([1.0])
    next_up = torch.nextafter(one, torch.tensor([2.0]))
    assert not torch.equal(one, next_up)
    assert repr(one.tolist()) != repr(next_up.tolist())
