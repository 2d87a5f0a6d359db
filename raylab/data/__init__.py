"""Data loaders used by two or more workloads: CIFAR images and their augmentation, and the
real handwritten digits that ship inside installed packages (``digits``)."""
