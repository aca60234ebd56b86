"""The models the Python API section times, each built the same way every run (seeded): the
README's 50-layer MLP (examples/models.py `make_deep`) and a ResNet-18 written out here in plain
torch.nn (torchvision's would do, but its wheels do not import beside every torch build, so the
bench carries the architecture itself: BasicBlock, [2, 2, 2, 2], out-of-place ReLUs, as in
torchvision's resnet18 but for `inplace=False`).

It owns what each model is and its input; nothing here times anything.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from timing import REPO

if TYPE_CHECKING:
    import torch
    from torch import nn

MLP_LAYERS = 50
MLP_WIDTH = 256
MLP_BATCH = 32
RESNET_INPUT = (1, 3, 64, 64)


@dataclass(frozen=True)
class BenchModel:
    """A model the section times: its name in the tables, a line saying what it is, and how to
    build it and its input (the input requiring grad, as `--input` makes it)."""

    name: str
    about: str
    build: Callable[[], tuple[nn.Module, torch.Tensor]]


def mlp() -> tuple[nn.Module, torch.Tensor]:
    """The README's 50-layer MLP (`make_deep`: Linear(256, 256) + ReLU blocks), built under seed
    0, and an input batch of 32 drawn right after it."""
    import torch

    spec = importlib.util.spec_from_file_location("gradexplain_examples",
                                                  REPO / "examples" / "models.py")
    assert spec is not None and spec.loader is not None
    examples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(examples)
    torch.manual_seed(0)
    model: nn.Module = examples.make_deep()
    assert len(list(model.children())) == MLP_LAYERS
    return model, torch.randn(MLP_BATCH, MLP_WIDTH).requires_grad_()


def resnet18() -> tuple[nn.Module, torch.Tensor]:
    """ResNet-18 (11.7 M parameters, 1,000 classes) in eval mode, so that batch norm uses its
    running statistics as a user explaining a trained model would, built under seed 0, and a
    1x3x64x64 image drawn right after it."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample: nn.Module | None = None
            if stride != 1 or inplanes != planes:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            result: torch.Tensor = self.relu(out + identity)
            return result

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, inplanes = [], 64
            for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers.append(nn.Sequential(BasicBlock(inplanes, planes, stride),
                                            BasicBlock(planes, planes, 1)))
                inplanes = planes
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            result: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
            return result

    torch.manual_seed(0)
    model = ResNet18().eval()
    return model, torch.randn(*RESNET_INPUT).requires_grad_()


MODELS = (
    BenchModel("mlp50", f"{MLP_LAYERS}-layer MLP (Linear({MLP_WIDTH}, {MLP_WIDTH}) + ReLU "
               f"blocks), batch {MLP_BATCH}", mlp),
    BenchModel("resnet18", "ResNet-18 (out-of-place ReLUs, eval mode), one "
               f"{'x'.join(map(str, RESNET_INPUT[1:]))} image", resnet18),
)
