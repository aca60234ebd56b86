"""A Python model whose submodule's name is 80, 150 or 300 characters long, through walk (text,
--timeline, --order), diff and report at 100 columns: every command renders (a long word in a
timeline cell once left its value no column: IndexError), no text line is over the width, and the
final gradients the timeline shows are the ones plain PyTorch computes here on the same model and
input. The model file is written in tmp_path; the commands run in this process (tests/helpers/
pycli.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.helpers.pycli import CLI, in_process

WIDTH = 100
LENGTHS = (80, 150, 300)
NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+(?:e[-+]?\d+)?")
SOURCE = '''\
import torch
from torch import nn


class Long(nn.Module):
    """A Linear under a very long attribute name, then Tanh; fixed weights."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.long_name = "l" * length
        layer = nn.Linear(3, 2)
        with torch.no_grad():
            layer.weight.copy_(torch.tensor([[0.5, -1.0, 0.25], [1.5, 0.75, -0.5]]))
            layer.bias.copy_(torch.tensor([0.1, -0.2]))
        setattr(self, self.long_name, layer)
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(getattr(self, self.long_name)(x))


''' + "".join(f"def make_{length}() -> Long:\n    return Long({length})\n\n\n"
              for length in LENGTHS)
INPUT = [[0.3, -0.2, 0.9], [1.1, 0.4, -0.7], [-0.5, 0.6, 0.2], [0.8, -1.2, 0.05]]


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    return in_process(capsys, monkeypatch)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("long_names")
    model = folder / "longnames.py"
    model.write_text(SOURCE, encoding="utf-8")
    inputs = folder / "x.pt"
    torch.save(torch.tensor(INPUT, requires_grad=True), inputs)
    return model, inputs


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("longnames_oracle", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_grads(path: Path, length: int) -> torch.Tensor:
    """x.grad, weight.grad and bias.grad of loss = sum(output), by plain PyTorch."""
    model = getattr(load_module(path), f"make_{length}")()
    x = torch.tensor(INPUT, requires_grad=True)
    model(x).sum().backward()
    layer = getattr(model, "l" * length)
    grads = [x.grad, layer.weight.grad, layer.bias.grad]
    return torch.cat([grad.flatten() for grad in grads if grad is not None])


def final_grads(text: str) -> list[list[str]]:
    """Each pass's `final .grad of every leaf` lines."""
    lines = text.splitlines()
    sections = []
    for start, line in enumerate(lines):
        if line == "final .grad of every leaf":
            end = next((index for index in range(start + 1, len(lines))
                        if not lines[index].startswith("  ") or lines[index].startswith(
                            "  FutureWarning")), len(lines))
            sections.append(lines[start + 1:end])
    return sections


@pytest.mark.parametrize("length", LENGTHS)
def test_every_command_renders_a_very_long_module_name_within_the_width(
        length: int, cli: CLI, files: tuple[Path, Path], tmp_path: Path) -> None:
    model, inputs = files
    session = tmp_path / "run.json"
    target = f"{model}:make_{length}"
    first = cli("walk", target, "--inputs", str(inputs), "--timeline", "--save", str(session))
    assert first.code == 0, first.stderr
    texts = {"walk --timeline": first.stdout}
    for words in ("walk", "walk --order", "diff"):
        command, *options = words.split()
        result = cli(command, "--load", str(session), *options)
        assert result.code == 0, (words, result.stderr)
        texts[words] = result.stdout
    report = cli("report", "--load", str(session))
    assert report.code == 0, report.stderr
    assert "l" * length in report.stdout  # markdown: the name whole, no width to keep
    for words, text in texts.items():
        assert "l" * 40 in text, words
        over = [line for line in text.splitlines() if len(line) > WIDTH]
        assert over == [], (words, over[:2])


@pytest.mark.parametrize("length", LENGTHS)
def test_the_timeline_shows_torchs_final_gradients(length: int, cli: CLI,
                                                     files: tuple[Path, Path]) -> None:
    model, inputs = files
    result = cli("walk", f"{model}:make_{length}", "--inputs", str(inputs), "--timeline")
    assert result.code == 0, result.stderr
    expected = torch_grads(model, length)
    sections = final_grads(result.stdout)
    assert len(sections) == 2  # the legacy and the full pass
    for lines in sections:
        text = "\n".join(lines)
        assert "min" not in text  # every value in full
        # x, weight and bias, each verified: one mark per value, on its last line.
        assert sum(line.endswith("✓") for line in lines) == 3
        # The names, read back from their column (broken after dots when too wide), whole.
        names = "".join(match.group(1).replace(" ", "") for line in lines
                        if (match := re.match(r"  (\S.*?)(?:\s{2,}|$)", line)))
        layer = "l" * length
        assert names == f"x.grad={layer}.weight.grad={layer}.bias.grad="
        shown = torch.tensor([float(number) for number in NUMBER.findall(text)])
        torch.testing.assert_close(shown, expected, rtol=1e-4, atol=1e-6)
