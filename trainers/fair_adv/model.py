"""Networks of the fair_adv workload: the shared CIFAR ResNets, and a small CNN for CPU smoke runs."""

from __future__ import annotations

import torch
from torch import nn

from raylab.data.cifar import MEAN, STD
from raylab.models.resnet import preact_resnet18, resnet18


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU layers (16, 32, 64 channels), two max-pools, average pool, linear.

    Takes images in [0, 1] and normalizes them first, like the ResNets.
    """

    def __init__(self, num_classes: int, mean=MEAN["cifar10"], std=STD["cifar10"], width: int = 16):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1))

        def block(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

        self.body = nn.Sequential(
            *block(3, width), nn.MaxPool2d(2),
            *block(width, 2 * width), nn.MaxPool2d(2),
            *block(2 * width, 4 * width), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.linear = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.body((x - self.mean) / self.std))


def build_model(name: str, num_classes: int, dataset: str = "cifar10") -> nn.Module:
    """The network ``name`` for ``num_classes`` classes, normalizing with ``dataset``'s statistics."""
    mean, std = MEAN[dataset], STD[dataset]
    if name == "preact_resnet18":
        return preact_resnet18(num_classes, mean, std)
    if name == "resnet18":
        return resnet18(num_classes, mean, std)
    if name == "small_cnn":
        return SmallCNN(num_classes, mean, std)
    raise ValueError(f"unknown model {name!r}")
