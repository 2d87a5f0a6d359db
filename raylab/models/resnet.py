"""CIFAR ResNet-18 and PreAct-ResNet-18 (He et al. 2016a/b), taking images in [0, 1].

The CIFAR variants: a 3x3 stride-1 stem with no max-pool, four stages of two basic blocks
(64, 128, 256, 512 channels; strides 1, 2, 2, 2), global average pooling and one linear layer.
``width`` (64 by default) scales the channels, for quick CPU runs.
Input normalization ``(x - mean) / std`` is the model's first operation, with ``mean`` and
``std`` registered buffers, so attacks and triggers work in [0, 1] pixel space.

Besides ``forward(x)`` each model has:

- ``features(x)``: the penultimate representation, ``[N, 512]`` after pooling (``feature_dim``);
- ``classify(features)``: the last linear layer (so features can be edited, e.g. ablated);
- ``forward_with_activations(x)``: ``(logits, {name: activation})`` with the stem's output,
  every block's output (``layer1.0`` ... ``layer4.1``), ``features``, and for PreAct
  ``final`` (the last ReLU map before pooling). ``last_relu`` names the activation whose
  sign pattern is the last layer of ReLU gates (``layer4.1`` for ResNet, ``final`` for PreAct).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


class BasicBlock(nn.Module):
    """conv-bn-relu-conv-bn plus shortcut, then relu."""

    def __init__(self, in_planes: int, planes: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class PreActBlock(nn.Module):
    """bn-relu-conv-bn-relu-conv plus shortcut (taken after the first bn-relu when projecting)."""

    def __init__(self, in_planes: int, planes: int, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(x))
        shortcut = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + shortcut


class _CifarResNet(nn.Module):
    """What both variants share: normalization, stages, pooling, head, activation access."""

    block: type[nn.Module]
    last_relu: str

    def __init__(
        self,
        num_classes: int,
        blocks: Sequence[int],
        mean: Sequence[float],
        std: Sequence[float],
        width: int = 64,
    ):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1))
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        in_planes = width
        stages = []
        planes_per_stage = (width, 2 * width, 4 * width, 8 * width)
        for planes, count, stride in zip(planes_per_stage, blocks, (1, 2, 2, 2)):
            layers = []
            for s in [stride] + [1] * (count - 1):
                layers.append(self.block(in_planes, planes, s))
                in_planes = planes
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.linear = nn.Linear(8 * width, num_classes)

    @property
    def num_classes(self) -> int:
        return self.linear.out_features

    @property
    def feature_dim(self) -> int:
        """Size of the penultimate features (512 at the standard width 64)."""
        return self.linear.in_features

    def _stem(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _final(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def _run(self, x: torch.Tensor, record: dict | None) -> torch.Tensor:
        out = self._stem((x - self.mean) / self.std)
        if record is not None:
            record["stem"] = out
        for stage_name in ("layer1", "layer2", "layer3", "layer4"):
            for i, block in enumerate(getattr(self, stage_name)):
                out = block(out)
                if record is not None:
                    record[f"{stage_name}.{i}"] = out
        out = self._final(out)
        if record is not None and self.last_relu == "final":
            record["final"] = out
        return F.adaptive_avg_pool2d(out, 1).flatten(1)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate features ``[N, feature_dim]`` (after global average pooling)."""
        return self._run(x, None)

    def classify(self, features: torch.Tensor) -> torch.Tensor:
        """Logits from penultimate features."""
        return self.linear(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self._run(x, None))

    def forward_with_activations(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits and the named activations (see the module docstring)."""
        record: dict[str, torch.Tensor] = {}
        features = self._run(x, record)
        record["features"] = features
        return self.linear(features), record


class ResNet(_CifarResNet):
    block = BasicBlock
    last_relu = "layer4.1"

    def __init__(self, num_classes=10, blocks=(2, 2, 2, 2), mean=CIFAR10_MEAN, std=CIFAR10_STD, width=64):
        super().__init__(num_classes, blocks, mean, std, width)
        self.bn1 = nn.BatchNorm2d(width)

    def _stem(self, x):
        return F.relu(self.bn1(self.conv1(x)))


class PreActResNet(_CifarResNet):
    block = PreActBlock
    last_relu = "final"

    def __init__(self, num_classes=10, blocks=(2, 2, 2, 2), mean=CIFAR10_MEAN, std=CIFAR10_STD, width=64):
        super().__init__(num_classes, blocks, mean, std, width)
        self.bn = nn.BatchNorm2d(8 * width)

    def _stem(self, x):
        return self.conv1(x)

    def _final(self, x):
        return F.relu(self.bn(x))


def resnet18(
    num_classes: int = 10,
    mean: Sequence[float] = CIFAR10_MEAN,
    std: Sequence[float] = CIFAR10_STD,
    width: int = 64,
) -> ResNet:
    """The CIFAR ResNet-18 (11.2M parameters for 10 classes at the standard ``width`` 64;
    a smaller width scales every stage's channels down, for CPU smoke runs)."""
    return ResNet(num_classes, (2, 2, 2, 2), mean, std, width)


def preact_resnet18(
    num_classes: int = 10,
    mean: Sequence[float] = CIFAR10_MEAN,
    std: Sequence[float] = CIFAR10_STD,
    width: int = 64,
) -> PreActResNet:
    """The CIFAR PreAct-ResNet-18 (11.2M parameters for 10 classes at ``width`` 64)."""
    return PreActResNet(num_classes, (2, 2, 2, 2), mean, std, width)
