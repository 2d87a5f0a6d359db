"""Networks of the fair_adv workload: the shared CIFAR ResNets, and a small CNN for CPU runs and
the 1-channel digits."""

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


def build_model(name: str, num_classes: int, dataset: str = "cifar10", width: int = 16) -> nn.Module:
    """The network ``name`` for ``num_classes`` classes, normalizing with ``dataset``'s statistics."""
    mean, std = MEAN[dataset], STD[dataset]
    if name == "preact_resnet18":
        return preact_resnet18(num_classes, mean, std)
    if name == "resnet18":
        return resnet18(num_classes, mean, std)
    if name == "small_cnn":
        return SmallCNN(num_classes, mean, std, width)
    raise ValueError(f"unknown model {name!r}")
