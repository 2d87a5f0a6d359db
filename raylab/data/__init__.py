"""Data loaders used by two or more workloads (CIFAR images and their augmentation)."""
