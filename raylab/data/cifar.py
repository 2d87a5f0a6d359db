"""CIFAR-10 and CIFAR-100 from their standard python archives, as uint8 tensors.

``load_cifar(name, data_dir)`` reads, in this order of preference, from ``data_dir``:

1. the extracted folder (``cifar-10-batches-py/`` or ``cifar-100-python/``), each file checked
   against its published MD5;
2. the archive (``cifar-10-python.tar.gz`` or ``cifar-100-python.tar.gz``), checked against
   its published MD5 and read in place (nothing is extracted);
3. with ``download=True``: the archive fetched from the dataset's home page into ``data_dir``,
   checked, then read as in 2.

``python -m raylab.data.stage`` downloads the archive once, before a sweep, into a folder or a
URI (the run's storage) that every trial reads with ``download: false``; a URI ``data_dir`` is
read through this node's copy of the staged archive (``raylab.data.node_copy``).

A checksum sidecar overrides the published value: ``<archive>.md5`` beside an archive, or
``MD5SUMS`` inside an extracted folder (lines ``<md5>  <file name>``). The small synthetic
archives that tests and smoke runs write (``write_synthetic_cifar``) carry one, so they go
through exactly the checks the real data goes through. Nothing downloads at import time.

Images stay uint8 ``[N, 3, 32, 32]`` (the archives' own channel-major layout); augmentation
and conversion to floats happen per batch on the training device (``raylab.data.augment``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import shutil
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from raylab.errors import UserError
from raylab.files import is_uri, user_path, write_atomic

Name = Literal["cifar10", "cifar100"]


@dataclass(frozen=True)
class Spec:
    """Where one CIFAR dataset lives and how to check it."""

    archive: str
    """File name of the archive (``.tar.gz``)."""
    folder: str
    """The folder the archive extracts to (also its top-level folder inside the tar)."""
    archive_md5: str
    """Published MD5 of the archive."""
    train: tuple[tuple[str, str], ...]
    """Training batch files and their MD5s."""
    test: tuple[tuple[str, str], ...]
    """Test batch files and their MD5s."""
    meta: tuple[str, str]
    """The file holding class names, and its MD5."""
    label_key: bytes
    """Key of the labels in each batch dict."""
    names_key: bytes
    """Key of the class names in the meta dict."""
    urls: tuple[str, ...]
    """Where the archive can be downloaded (tried in order)."""


SPECS: dict[str, Spec] = {
    "cifar10": Spec(
        archive="cifar-10-python.tar.gz",
        folder="cifar-10-batches-py",
        archive_md5="c58f30108f718f92721af3b95e74349a",
        train=(
            ("data_batch_1", "c99cafc152244af753f735de768cd75f"),
            ("data_batch_2", "d4bba439e000b95fd0a9bffe97cbabec"),
            ("data_batch_3", "54ebc095f3ab1f0389bbae665268c751"),
            ("data_batch_4", "634d18415352ddfa80567beed471001a"),
            ("data_batch_5", "482c414d41f54cd18b22e5b47cb7c3cb"),
        ),
        test=(("test_batch", "40351d587109b95175f43aff81a1287e"),),
        meta=("batches.meta", "5ff9c542aee3614f3951f8cda6e48888"),
        label_key=b"labels",
        names_key=b"label_names",
        urls=(
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            "https://cave.cs.toronto.edu/kriz/cifar-10-python.tar.gz",
        ),
    ),
    "cifar100": Spec(
        archive="cifar-100-python.tar.gz",
        folder="cifar-100-python",
        archive_md5="eb9058c3a382ffc7106e4002c42a8d85",
        train=(("train", "16019d7e3df5f24257cddd939b257f8d"),),
        test=(("test", "f0ef6b0ae62326f3e7ffdfab6717acfc"),),
        meta=("meta", "7973b15100ade9c7d40fb424638fde48"),
        label_key=b"fine_labels",
        names_key=b"fine_label_names",
        urls=(
            "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
            "https://cave.cs.toronto.edu/kriz/cifar-100-python.tar.gz",
        ),
    ),
}

# Per-channel statistics of the real training sets, for the models' input normalization.
MEAN = {"cifar10": (0.4914, 0.4822, 0.4465), "cifar100": (0.5071, 0.4865, 0.4409)}
STD = {"cifar10": (0.2470, 0.2435, 0.2616), "cifar100": (0.2673, 0.2564, 0.2762)}

SIDECAR_SUFFIX = ".md5"
FOLDER_SUMS = "MD5SUMS"


@dataclass(frozen=True)
class ImageData:
    """A labelled image dataset held in memory as uint8 tensors."""

    train_x: torch.Tensor
    """Training images, uint8 ``[N, C, H, W]`` (channel-major; CIFAR: ``[N, 3, 32, 32]`` RGB)."""
    train_y: torch.Tensor
    """Training labels, int64 ``[N]``."""
    test_x: torch.Tensor
    """Test images, uint8 ``[M, C, H, W]``."""
    test_y: torch.Tensor
    """Test labels, int64 ``[M]``."""
    classes: tuple[str, ...]
    """Class names, indexed by label."""

    @property
    def num_classes(self) -> int:
        return len(self.classes)


# ----------------------------------------------------------------------------- loading


def load_cifar(name: Name, data_dir: str | os.PathLike, download: bool = False) -> ImageData:
    """Load CIFAR-10 or CIFAR-100 from ``data_dir`` (see the module docstring for the order).

    Raises ``UserError`` naming where it looked and how to get the data when the dataset is
    missing, and naming the file when a checksum does not match.
    """
    spec = _spec(name)
    root = _root(data_dir, name)
    folder, archive = root / spec.folder, root / spec.archive
    if folder.is_dir():
        return _read(spec, _folder_reader(spec, folder))
    if not archive.is_file() and download:
        _download(spec, root)
    if archive.is_file():
        return _read(spec, _archive_reader(spec, archive))
    raise UserError(
        f"{name} not found: looked for {folder} and {archive}; "
        f"{'the download failed' if download else 'download it with download: true (online)'}, "
        f"or fetch {spec.urls[0]} (MD5 {spec.archive_md5}) into {root}; for a smoke run without "
        f"real images set synthetic_data: true"
    )


def prepare_cifar(
    name: Name,
    data_dir: str | os.PathLike,
    download: bool = False,
    synthetic_data: bool = False,
    synthetic_train: int = 500,
    synthetic_test: int = 200,
) -> ImageData:
    """What a workload's loop calls with its config's ``dataset``/``data_dir``/``download``/
    ``synthetic_data``: with ``synthetic_data``, write a small synthetic archive (seed 0, so
    concurrent trials write identical bytes) into ``data_dir`` first; then ``load_cifar``."""
    root = _root(data_dir, name)
    if synthetic_data:
        write_synthetic_cifar(root, name, n_train=synthetic_train, n_test=synthetic_test, seed=0)
    return load_cifar(name, root, download=download)


def check_cifar(name: Name, data_dir: str | os.PathLike, download: bool = False) -> Path:
    """Preflight: the file ``load_cifar`` would read, with its checksums verified.

    ``UserError`` if there is none, or if a checksum does not match (reading the files costs
    about a second for the real archives).
    """
    spec = _spec(name)
    root = _root(data_dir, name)
    folder, archive = root / spec.folder, root / spec.archive
    if folder.is_dir():
        read = _folder_reader(spec, folder)
        for member, md5 in (*spec.train, *spec.test, spec.meta):
            read(member, md5)
        return folder
    if archive.is_file():
        _archive_reader(spec, archive)
        return archive
    if download:
        return root / spec.archive  # load_cifar fetches it (and names any failure)
    raise UserError(
        f"{name} not found: looked for {root / spec.folder} and {root / spec.archive}; stage it "
        f"once with python -m raylab.data.stage {name} {data_dir}, set download: true (online), "
        f"or fetch {spec.urls[0]} (MD5 {spec.archive_md5}) into {root}; "
        f"for a smoke run without real images set synthetic_data: true"
    )


def _root(data_dir: str | os.PathLike, name: str) -> Path:
    """The local folder to read: ``data_dir`` itself, or for a URI (the run's storage, where
    ``python -m raylab.data.stage`` put the archive) this node's copy of it."""
    if is_uri(data_dir):
        from raylab.data.node_copy import node_copy

        spec = _spec(name)
        return node_copy(str(data_dir), [spec.archive, spec.archive + SIDECAR_SUFFIX])
    return user_path(data_dir)


def _spec(name: str) -> Spec:
    if name not in SPECS:
        raise UserError(f"dataset: unknown CIFAR dataset '{name}'; choose one of {', '.join(SPECS)}")
    return SPECS[name]


def _folder_reader(spec: Spec, folder: Path):
    overrides = _read_sums(folder / FOLDER_SUMS) if (folder / FOLDER_SUMS).is_file() else {}

    def read(member: str, published_md5: str) -> bytes:
        path = folder / member
        if not path.is_file():
            raise UserError(f"{path}: missing from the extracted dataset; delete {folder} and "
                            f"load from the archive {spec.archive} (or download it again)")
        data = path.read_bytes()
        _verify(data, overrides.get(member, published_md5), path)
        return data

    return read


def _archive_reader(spec: Spec, archive: Path):
    sidecar = archive.with_name(archive.name + SIDECAR_SUFFIX)
    expected = _read_sums(sidecar).get(archive.name) if sidecar.is_file() else spec.archive_md5
    raw = archive.read_bytes()
    _verify(raw, expected, archive)
    try:
        tar = tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz")
    except tarfile.TarError as err:
        raise UserError(f"{archive}: not a readable .tar.gz ({err})") from None

    def read(member: str, published_md5: str) -> bytes:
        try:
            handle = tar.extractfile(f"{spec.folder}/{member}")
        except KeyError:
            handle = None
        if handle is None:
            raise UserError(f"{archive}: has no member {spec.folder}/{member}; not a CIFAR archive")
        return handle.read()

    return read


def _read(spec: Spec, read) -> ImageData:
    def batches(files):
        xs, ys = [], []
        for member, md5 in files:
            entry = _unpickle(read(member, md5), member)
            xs.append(np.asarray(entry[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(entry[spec.label_key], dtype=np.int64))
        return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))

    train_x, train_y = batches(spec.train)
    test_x, test_y = batches(spec.test)
    meta = _unpickle(read(*spec.meta), spec.meta[0])
    classes = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in meta[spec.names_key])
    return ImageData(train_x, train_y, test_x, test_y, classes)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain data and NumPy arrays only: a crafted file cannot run code."""

    ALLOWED = {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),  # how protocol-2 pickles written by Python 3 store bytes
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _unpickle(data: bytes, member: str) -> dict:
    # The archives are Python 2 pickles of dicts of numpy arrays, lists, bytes and ints.
    try:
        entry = _ArrayUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as err:  # noqa: BLE001 - any unpickling failure means a bad file
        raise UserError(f"{member}: cannot unpickle a CIFAR batch ({err})") from None
    if not isinstance(entry, dict):
        raise UserError(f"{member}: expected a pickled dict, got {type(entry).__name__}")
    return entry


def _verify(data: bytes, expected: str | None, path: Path) -> None:
    actual = hashlib.md5(data).hexdigest()
    if expected is None or actual != expected:
        raise UserError(
            f"{path}: checksum mismatch (MD5 {actual}, expected {expected}); the file is "
            f"corrupted or incomplete: delete it and download it again"
        )


def _read_sums(path: Path) -> dict[str, str]:
    sums = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            sums[parts[1].lstrip("*")] = parts[0]
    return sums


def _download(spec: Spec, root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in spec.urls:
        fd, tmp = tempfile.mkstemp(prefix=f".{spec.archive}.", dir=root)
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
                shutil.copyfileobj(response, out)
            actual = hashlib.md5(Path(tmp).read_bytes()).hexdigest()
            if actual != spec.archive_md5:
                errors.append(f"{url}: MD5 {actual}, expected {spec.archive_md5}")
                continue
            os.replace(tmp, root / spec.archive)
            return
        except OSError as err:
            errors.append(f"{url}: {err}")
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    raise UserError(f"could not download {spec.archive} into {root}: {'; '.join(errors)}")


# ----------------------------------------------------------------------------- synthetic


def write_synthetic_cifar(
    data_dir: str | os.PathLike,
    name: Name = "cifar10",
    n_train: int = 500,
    n_test: int = 200,
    seed: int = 0,
) -> Path:
    """Write a small archive in the exact format of the real one; return the archive's path.

    Same file name, same members, same pickled dicts (``b"data"`` as uint8 ``[N, 3072]``,
    ``b"labels"`` or ``b"fine_labels"``/``b"coarse_labels"``, the meta file with class
    names), plus an ``.md5`` sidecar so the loader's checksum check applies to it.

    Each class has a smooth colour template (a random mix of low-frequency waves drawn from
    ``seed``); an image is its class template, shifted by a few pixels and brightened at random,
    plus pixel noise. Small CNNs learn it well above chance within an epoch or two. The
    bottom-right corner is kept away from pure white, so a white-patch trigger is new there.
    """
    spec = _spec(name)
    num_classes = 10 if name == "cifar10" else 100
    rng = np.random.default_rng(seed)
    templates = _templates(rng, num_classes)
    train_x, train_y = _synthetic_images(rng, templates, n_train)
    test_x, test_y = _synthetic_images(rng, templates, n_test)
    names = [f"class_{i:03d}".encode() for i in range(num_classes)]

    def batch(x, y, label):
        entry = {b"batch_label": label.encode(), b"data": x.reshape(len(x), -1),
                 b"filenames": [f"synthetic_{i:06d}.png".encode() for i in range(len(x))]}
        if name == "cifar10":
            entry[b"labels"] = [int(v) for v in y]
        else:
            entry[b"fine_labels"] = [int(v) for v in y]
            entry[b"coarse_labels"] = [int(v) // 5 for v in y]
        return pickle.dumps(entry, protocol=2)

    members = {}
    parts = np.array_split(np.arange(n_train), len(spec.train))
    for (member, _), idx in zip(spec.train, parts):
        members[member] = batch(train_x[idx], train_y[idx], f"synthetic training batch {member}")
    members[spec.test[0][0]] = batch(test_x, test_y, "synthetic testing batch")
    if name == "cifar10":
        meta = {b"label_names": names, b"num_cases_per_batch": len(parts[0]), b"num_vis": 3072}
    else:
        meta = {b"fine_label_names": names,
                b"coarse_label_names": [f"super_{i:02d}".encode() for i in range(20)]}
    members[spec.meta[0]] = pickle.dumps(meta, protocol=2)

    root = Path(data_dir)
    archive = root / spec.archive
    sidecar = archive.with_name(archive.name + SIDECAR_SUFFIX)
    if archive.exists() and not sidecar.exists():
        raise UserError(f"{archive}: exists and has no {SIDECAR_SUFFIX} sidecar, so it may be the "
                        f"real dataset; refusing to overwrite it with synthetic data (choose "
                        f"another data_dir)")
    root.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(f"{spec.folder}/{member}")  # mtime 0: same bytes every time
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    compressed = gzip.compress(buffer.getvalue(), mtime=0)
    # Same arguments, same bytes; and atomic replacements: trials sharing data_dir may write
    # these files at the same time.
    write_atomic(sidecar, f"{hashlib.md5(compressed).hexdigest()}  {archive.name}\n".encode())
    write_atomic(archive, compressed)
    return archive


def _templates(rng: np.random.Generator, num_classes: int) -> np.ndarray:
    yy, xx = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    templates = np.empty((num_classes, 3, 32, 32))
    for c in range(num_classes):
        image = np.zeros((3, 32, 32))
        for _ in range(3):
            fy, fx = rng.uniform(0.5, 3.0, size=2) * 2 * np.pi / 32
            phase = rng.uniform(0, 2 * np.pi)
            colour = rng.uniform(-1, 1, size=3)
            image += colour[:, None, None] * np.sin(fy * yy + fx * xx + phase)[None]
        templates[c] = 128 + 45 * image / np.abs(image).max()
    return templates


def _synthetic_images(rng: np.random.Generator, templates: np.ndarray, n: int):
    labels = rng.integers(0, len(templates), size=n)
    images = np.empty((n, 3, 32, 32))
    for i, label in enumerate(labels):
        shift = rng.integers(-3, 4, size=2)
        image = np.roll(templates[label], tuple(shift), axis=(1, 2))
        images[i] = image * rng.uniform(0.8, 1.2) + rng.normal(0, 20, size=(3, 32, 32))
    images[:, :, -4:, -4:] = np.minimum(images[:, :, -4:, -4:], 200)
    return np.clip(np.rint(images), 0, 255).astype(np.uint8), labels.astype(np.int64)
