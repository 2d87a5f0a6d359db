"""Models used by two or more workloads (the CIFAR ResNet-18 and PreAct-ResNet-18)."""

from raylab.models.resnet import PreActResNet, ResNet, preact_resnet18, resnet18

__all__ = ["PreActResNet", "ResNet", "preact_resnet18", "resnet18"]
