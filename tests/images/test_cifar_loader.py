"""The CIFAR loader: the real archive format round-trips, checksums and missing data are errors."""

import hashlib
import io
import pickle
import tarfile

import numpy as np
import pytest
import torch

from raylab.data.cifar import (
    SPECS, check_cifar, load_cifar, prepare_cifar, write_synthetic_cifar,
)
from raylab.errors import UserError
from raylab.files import user_path


@pytest.mark.parametrize("name, num_classes", [("cifar10", 10), ("cifar100", 100)])
def test_synthetic_archive_round_trips_through_the_loader(tmp_path, name, num_classes):
    archive = write_synthetic_cifar(tmp_path, name, n_train=230, n_test=70, seed=3)
    assert archive.name == SPECS[name].archive
    data = load_cifar(name, tmp_path)
    assert data.train_x.shape == (230, 3, 32, 32) and data.train_x.dtype == torch.uint8
    assert data.test_x.shape == (70, 3, 32, 32) and data.test_y.dtype == torch.int64
    assert data.num_classes == num_classes == len(data.classes)
    assert int(data.train_y.min()) >= 0 and int(data.train_y.max()) < num_classes

    # The bytes on disk are the real format: read one batch by hand as a CIFAR user would.
    spec = SPECS[name]
    with tarfile.open(archive, "r:gz") as tar:
        names = set(tar.getnames())
        assert {f"{spec.folder}/{m}" for m, _ in spec.train + spec.test} | {f"{spec.folder}/{spec.meta[0]}"} <= names
        entry = pickle.load(tar.extractfile(f"{spec.folder}/{spec.test[0][0]}"), encoding="bytes")
    assert entry[b"data"].dtype == np.uint8 and entry[b"data"].shape == (70, 3072)
    first = entry[b"data"][0].reshape(3, 32, 32)  # R plane, G plane, B plane, row-major
    assert torch.equal(data.test_x[0], torch.from_numpy(first))
    assert data.test_y.tolist() == list(entry[spec.label_key])


def test_same_seed_same_data_and_classes_are_learnable_structure(tmp_path):
    write_synthetic_cifar(tmp_path / "a", n_train=200, n_test=50, seed=1)
    write_synthetic_cifar(tmp_path / "b", n_train=200, n_test=50, seed=1)
    a, b = load_cifar("cifar10", tmp_path / "a"), load_cifar("cifar10", tmp_path / "b")
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y)
    # Nearest class mean on raw pixels beats chance by far: the classes carry structure.
    x = a.train_x.float().flatten(1)
    means = torch.stack([x[a.train_y == c].mean(0) for c in range(10)])
    pred = torch.cdist(a.test_x.float().flatten(1), means).argmin(1)
    assert (pred == a.test_y).float().mean() > 0.5


def test_extracted_folder_is_read_and_checked(tmp_path):
    archive = write_synthetic_cifar(tmp_path, n_train=100, n_test=40)
    from_archive = load_cifar("cifar10", tmp_path)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    folder = tmp_path / "x" / "cifar-10-batches-py"
    # Without a checksum list the published MD5s apply, which synthetic files do not match.
    with pytest.raises(UserError, match="checksum mismatch"):
        load_cifar("cifar10", tmp_path / "x")
    sums = "".join(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.name}\n" for p in folder.iterdir())
    (folder / "MD5SUMS").write_text(sums)
    from_folder = load_cifar("cifar10", tmp_path / "x")
    assert torch.equal(from_folder.train_x, from_archive.train_x)
    assert torch.equal(from_folder.test_y, from_archive.test_y)


def test_corrupted_archive_is_a_checksum_error(tmp_path):
    archive = write_synthetic_cifar(tmp_path, n_train=50, n_test=20)
    raw = bytearray(archive.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    archive.write_bytes(bytes(raw))
    with pytest.raises(UserError, match=r"cifar-10-python\.tar\.gz: checksum mismatch"):
        load_cifar("cifar10", tmp_path)


def test_real_archive_name_without_sidecar_is_checked_against_published_md5(tmp_path):
    archive = write_synthetic_cifar(tmp_path, n_train=50, n_test=20)
    archive.with_name(archive.name + ".md5").unlink()
    with pytest.raises(UserError, match="expected c58f30108f718f92721af3b95e74349a"):
        load_cifar("cifar10", tmp_path)


def test_missing_dataset_names_where_it_looked_and_how_to_get_it(tmp_path):
    with pytest.raises(UserError) as err:
        load_cifar("cifar100", tmp_path / "nowhere")
    message = str(err.value)
    assert str(tmp_path / "nowhere" / "cifar-100-python.tar.gz") in message
    assert str(tmp_path / "nowhere" / "cifar-100-python") in message
    assert "download: true" in message and "cifar-100-python.tar.gz" in message


def test_unknown_dataset_name_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="unknown CIFAR dataset 'svhn'"):
        load_cifar("svhn", tmp_path)


def test_archive_with_wrong_members_is_a_user_error(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("something/else")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    archive = tmp_path / "cifar-10-python.tar.gz"
    archive.write_bytes(buffer.getvalue())
    (tmp_path / "cifar-10-python.tar.gz.md5").write_text(
        f"{hashlib.md5(buffer.getvalue()).hexdigest()}  cifar-10-python.tar.gz\n")
    with pytest.raises(UserError, match="not a CIFAR archive"):
        load_cifar("cifar10", tmp_path)


def test_synthetic_writes_are_byte_identical_and_never_replace_real_data(tmp_path):
    first = write_synthetic_cifar(tmp_path, n_train=60, n_test=20).read_bytes()
    second = write_synthetic_cifar(tmp_path, n_train=60, n_test=20).read_bytes()
    assert first == second  # concurrent trials sharing data_dir write the same bytes
    real = tmp_path / "real"
    real.mkdir()
    (real / "cifar-10-python.tar.gz").write_bytes(b"pretend this is the real archive")
    with pytest.raises(UserError, match="refusing to overwrite"):
        write_synthetic_cifar(real)


def test_prepare_cifar_synthetic_and_relative_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYLAB_LAUNCH_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path.parent)
    assert user_path("data/x") == tmp_path / "data" / "x"
    assert user_path(tmp_path / "abs") == tmp_path / "abs"
    data = prepare_cifar("cifar10", "data/x", synthetic_data=True, synthetic_train=40, synthetic_test=10)
    assert len(data.train_y) == 40 and (tmp_path / "data" / "x" / "cifar-10-python.tar.gz").is_file()
    assert check_cifar("cifar10", "data/x") == tmp_path / "data" / "x" / "cifar-10-python.tar.gz"
    with pytest.raises(UserError, match="not found"):
        check_cifar("cifar10", "data/elsewhere")
