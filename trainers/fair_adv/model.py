"""Networks of the fair_adv workload: the shared CIFAR ResNets, the WideResNet-34-10 of TRADES,
FRL and Rice et al.'s strongest runs, and a small CNN for CPU runs and the 1-channel digits."""

from __future__ import annotations

import torch
from torch import nn

from raylab.data.cifar import MEAN as CIFAR_MEAN
from raylab.data.cifar import STD as CIFAR_STD
from raylab.models.resnet import preact_resnet18, resnet18

# MNIST's usual normalization, for both digit sets (an affine map that the first BatchNorm
# would absorb anyway)
MEAN = {**CIFAR_MEAN, "mnist5k": (0.1307,), "digits8x8": (0.1307,)}
STD = {**CIFAR_STD, "mnist5k": (0.3081,), "digits8x8": (0.3081,)}


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU layers (width, 2 width, 4 width channels), two max-pools, average
    pool, linear; as many input channels as ``mean`` has entries (3 for CIFAR, 1 for digits).

    Takes images in [0, 1] and normalizes them first, like the ResNets.
    """

    def __init__(self, num_classes: int, mean=CIFAR_MEAN["cifar10"], std=CIFAR_STD["cifar10"], width: int = 16):
        super().__init__()
        channels = len(mean)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, channels, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, channels, 1, 1))

        def block(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

        self.body = nn.Sequential(
            *block(channels, width),
            nn.MaxPool2d(2),
            *block(width, 2 * width),
            nn.MaxPool2d(2),
            *block(2 * width, 4 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.linear = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.body((x - self.mean) / self.std))


class WideBlock(nn.Module):
    """Pre-activation wide basic block (Zagoruyko and Komodakis 2016):
    ``out = conv2(relu(bn2(conv1(relu(bn1(x)))))) + shortcut``. The shortcut is the input
    itself when the shape is kept, else a 1x1 convolution of ``relu(bn1(x))`` (the
    pre-activated input, as in the WRN papers' code)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.project = None if cin == cout and stride == 1 else nn.Conv2d(cin, cout, 1, stride, 0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = torch.relu(self.bn1(x))
        out = self.conv2(torch.relu(self.bn2(self.conv1(pre))))
        return out + (x if self.project is None else self.project(pre))


class WideResNet(nn.Module):
    """WRN-``depth``-``widen``: a 3x3 stem of 16 channels, three groups of ``(depth - 4) / 6``
    wide blocks with ``16 k``, ``32 k``, ``64 k`` channels (strides 1, 2, 2), BN-ReLU, global
    average pooling and a linear layer. WRN-34-10 (TRADES's, FRL's and Rice et al.'s network):
    5 blocks a group, 160/320/640 channels, 46.2M parameters on CIFAR-10. Takes images in
    [0, 1] and normalizes them first, like the ResNets."""

    def __init__(self, num_classes: int, mean, std, depth: int = 34, widen: int = 10):
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"WideResNet depth must be 6 n + 4, got {depth}")
        n = (depth - 4) // 6
        channels = len(mean)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, channels, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, channels, 1, 1))
        widths = [16, 16 * widen, 32 * widen, 64 * widen]
        self.stem = nn.Conv2d(channels, widths[0], 3, 1, 1, bias=False)
        groups = []
        for g, stride in enumerate((1, 2, 2)):
            blocks = [
                WideBlock(widths[g] if i == 0 else widths[g + 1], widths[g + 1], stride if i == 0 else 1)
                for i in range(n)
            ]
            groups.append(nn.Sequential(*blocks))
        self.groups = nn.Sequential(*groups)
        self.bn = nn.BatchNorm2d(widths[3])
        self.linear = nn.Linear(widths[3], num_classes)
        for m in self.modules():  # He initialization of the convolutions, as the WRN code
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.groups(self.stem((x - self.mean) / self.std))
        out = torch.relu(self.bn(out))
        return self.linear(torch.flatten(nn.functional.adaptive_avg_pool2d(out, 1), 1))


def build_model(name: str, num_classes: int, dataset: str = "cifar10", width: int = 16) -> nn.Module:
    """The network ``name`` for ``num_classes`` classes, normalizing with ``dataset``'s statistics."""
    mean, std = MEAN[dataset], STD[dataset]
    if name == "preact_resnet18":
        return preact_resnet18(num_classes, mean, std)
    if name == "resnet18":
        return resnet18(num_classes, mean, std)
    if name == "wrn34_10":
        return WideResNet(num_classes, mean, std, depth=34, widen=10)
    if name == "small_cnn":
        return SmallCNN(num_classes, mean, std, width)
    raise ValueError(f"unknown model {name!r}")
