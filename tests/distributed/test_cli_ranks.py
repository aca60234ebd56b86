"""`walk --ranks N` at the command line: bad options are one line and exit 2 before any rank
starts; a rank that fails is named, with its reason, and no rank is left behind; a good run
exits 0 with stdout that parses (JSON) and nothing of the ranks' own output on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers.cli import SPECS, one_error_line, run_cli
from tests.helpers.pycli import CLI, in_process

DDP_SPEC = str(SPECS / "ddp_hooks.yaml")
TWO_MODULES = str(SPECS / "two_modules.yaml")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    return in_process(capsys, monkeypatch)


@pytest.mark.parametrize("args", [
    ("--ranks", "0"), ("--ranks", "9"), ("--ranks", "two"), ("--ranks", "2", "--wrap", "zero"),
])
def test_bad_values_are_usage_errors(cli: CLI, args: tuple[str, ...]) -> None:
    result = cli("walk", DDP_SPEC, *args)
    assert result.code == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_wrap_needs_ranks(cli: CLI) -> None:
    line = one_error_line(cli("walk", DDP_SPEC, "--wrap", "fsdp"))
    assert "--wrap" in line and "--ranks" in line


@pytest.mark.parametrize("flag", [("--save", "out.json"), ("--order",), ("--module", "fc1"),
                                  ("--hook", "tensor"), ("--pass", "legacy"), ("--all-blocks",),
                                  ("--threads", "2")])
def test_single_process_options_are_refused_by_name(cli: CLI, flag: tuple[str, ...],
                                                    tmp_path: Path) -> None:
    args = tuple(str(tmp_path / item) if item.endswith(".json") else item for item in flag)
    line = one_error_line(cli("walk", DDP_SPEC, "--ranks", "2", *args))
    assert flag[0] in line
    assert not (tmp_path / "out.json").exists()


def test_load_with_ranks_is_refused(cli: CLI, tmp_path: Path) -> None:
    saved = tmp_path / "run.json"
    assert cli("walk", TWO_MODULES, "--save", str(saved), "--format", "json").code == 0
    line = one_error_line(cli("walk", "--load", str(saved), "--ranks", "2"))
    assert "--ranks" in line


def test_a_batch_that_ranks_cannot_share_is_said(cli: CLI, tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_text("import torch\ndef make():\n    return torch.nn.Linear(3, 2)\n")
    line = one_error_line(cli("walk", f"{model}:make", "--input", "3x3", "--ranks", "2"))
    assert "3 rows" in line and "2" in line


FAILING_RANK = """
import os
import torch
import torch.distributed as dist


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x):
        if dist.is_initialized() and dist.get_rank() == 1:
            raise ValueError("rank one refuses")
        return self.linear(x)


def make():
    return Model()
"""


def test_a_failing_rank_is_named_and_nothing_hangs(tmp_path: Path) -> None:
    """Rank 1 raises in its forward while rank 0 waits for it in a collective: the walk says
    which rank failed and why, exits non-zero, and no rank outlives it (a separate process, as
    a user runs it; `run_cli` would time out on a hang)."""
    model = tmp_path / "failing.py"
    model.write_text(FAILING_RANK)
    result = run_cli("walk", f"{model}:make", "--input", "2x2", "--ranks", "2")
    assert result.code in (1, 2), result
    assert "Traceback" not in result.stderr
    assert "rank 1" in result.stderr
    assert "rank one refuses" in result.stderr
    assert result.stdout == ""


def test_json_parses_and_carries_every_rank(tmp_path: Path) -> None:
    result = run_cli("walk", DDP_SPEC, "--ranks", "2", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert [rank["rank"] for rank in document["ranks"]] == [0, 1]
    assert document["world_size"] == 2 and document["wrap"] == "ddp"


def test_a_python_model_walks_on_two_ranks(cli: CLI, tmp_path: Path) -> None:
    """A model of our own with a batch of 4 split 2 + 2: exit 0; each rank's tensor hook on
    `0.weight` gets plain torch's gradient of that rank's half, and `.grad` after backward is
    the mean of the halves' on both ranks."""
    from gradexplain.capture.pymodel import parse_input, random_inputs

    model = tmp_path / "mlp.py"
    model.write_text(MLP)
    result = cli("walk", f"{model}:make", "--input", "4x3", "--ranks", "2", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    (batch,) = random_inputs([parse_input("4x3")])  # the inputs the walk drew
    local = []
    for half in batch.chunk(2):
        torch.manual_seed(1)
        plain = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
        plain(half.clone().requires_grad_(True)).sum().backward()
        first = plain[0]
        assert isinstance(first, torch.nn.Linear) and first.weight.grad is not None
        local.append(first.weight.grad)
    mean = (local[0] + local[1]) / 2
    for rank in document["ranks"]:
        full = next(item for item in rank["passes"] if item["mode"] == "full")
        seen = [event["args"][0]["value"] for event in full["events"]
                if event["hook"] == "tensor" and event["target"] == "0.weight"]
        assert len(seen) == 1
        assert torch.allclose(torch.tensor(seen[0]), local[rank["rank"]], atol=1e-6)
        assert torch.allclose(torch.tensor(full["grads"]["0.weight"]), mean, atol=1e-6)


MLP = """import torch
def make():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
"""



def test_what_torch_refuses_in_a_rank_is_shown_and_explained(cli: CLI) -> None:
    """column_backward under FSDP2: torch refuses its second call (a gathered parameter FSDP2
    had freed). The walk exits 1 and shows each rank's calls with what happened and the fix, in
    text and JSON, instead of a failure 'explained above' that nothing above explained."""
    spec = str(SPECS / "column_backward.yaml")
    text = cli("walk", spec, "--ranks", "2", "--wrap", "fsdp")
    assert text.code == 1, text.stderr
    for rank in (0, 1):
        assert f"rank {rank}: the calls, and what torch refused" in text.stdout
    assert "freed" in text.stdout and "run the forward again" in text.stdout
    result = cli("walk", spec, "--ranks", "2", "--wrap", "fsdp", "--format", "json")
    assert result.code == 1
    for rank in json.loads(result.stdout)["ranks"]:
        refused = [step for step in rank["runs"] if step["error"] is not None]
        assert refused and all("freed" in step["explanation"]["what"] for step in refused)
        assert all("returns:" in step["explanation"]["fix"] for step in refused)


def test_the_fix_the_walk_gives_for_a_freed_tensor_works(cli: CLI, tmp_path: Path) -> None:
    """As the explanation says: with p0, p1 and p2 returned by the model, FSDP2's hooks are on
    each, and every call walks with every check verified."""
    text = (SPECS / "column_backward.yaml").read_text(encoding="utf-8")
    returned = text.replace('forward:\n  - "h = fc1(x)"',
                            'forward:\n  returns: [p0, p1, p2]\n  steps:\n  - "h = fc1(x)"')
    assert returned != text
    spec = tmp_path / "returned.yaml"
    spec.write_text(returned, encoding="utf-8")
    result = cli("walk", str(spec), "--ranks", "2", "--wrap", "fsdp")
    assert result.code == 0, result.stdout[-2000:]


NAN_SPEC = """\
name: nan_ddp
seed: 0
inputs:
  x: {randn: [2, 110]}
params: {w: {randn: [110, 100]}}
forward: ["h = x @ w", "z = h * 0", "loss = sum(sqrt(z * z))"]
backward: loss
distributed:
  wrap: ddp
"""


def test_the_ranks_verdict_counts_values_a_nan_summary_left_unchecked(tmp_path: Path) -> None:
    """w has 11,000 elements, recorded as a summary; sqrt at 0 makes its gradient nan (plain
    torch below). Each rank's such values are not checked, and the verdict says how many."""
    w = torch.randn(110, 100, requires_grad=True)
    z = (torch.randn(2, 110) @ w) * 0
    gradient, = torch.autograd.grad(torch.sqrt(z * z).sum(), w)
    assert gradient.isnan().all()  # torch: 0 · inf
    spec = tmp_path / "nan.yaml"
    spec.write_text(NAN_SPEC)
    result = run_cli("walk", str(spec), "--ranks", "2")
    assert result.code == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert "labelled values not checked: recorded as summaries holding nan or inf" in said
    assert "checks verified" in said
