"""SMILES in, canonical keys and RDKit molecules out: parsing, files, scaffolds (RDKit only).

This module imports neither torch-geometric nor boltz, so the teacher command runs it in the
separate boltz environment as well as in the main one.

Conventions used across the workload:

- A molecule's key is its RDKit canonical SMILES (``canonical_smiles``).
- Atom ``i`` of a molecule means atom ``i`` of ``Chem.MolFromSmiles(key)`` (heavy atoms only,
  in the order the canonical SMILES writes them). Embedding stores, graphs and teachers all
  use this order.
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Iterable

from rdkit import Chem, RDConfig, RDLogger
from rdkit.Chem.Scaffolds import MurckoScaffold

from raylab.errors import UserError
from raylab.files import user_path

SMILES_COLUMNS = ("smiles", "SMILES", "Smiles", "Drug", "canonical_smiles")
"""CSV columns read as SMILES, first match wins (``Drug`` is the TDC ADMET column)."""


def nci_smiles_path() -> Path:
    """RDKit's shipped NCI set: 5,000 real molecules, the offline default corpus."""
    return Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"


def canonical_smiles(smiles: str) -> str | None:
    """The RDKit canonical SMILES of ``smiles``; ``None`` if RDKit cannot parse it."""
    mol = mol_from_smiles(smiles)
    return None if mol is None else Chem.MolToSmiles(mol)


def mol_from_smiles(smiles: str) -> Chem.Mol | None:
    """``Chem.MolFromSmiles`` without RDKit's log lines; ``None`` for an invalid or empty one."""
    if not isinstance(smiles, str) or not smiles.strip():
        return None
    RDLogger.DisableLog("rdApp.*")
    try:
        mol = Chem.MolFromSmiles(smiles.strip())
    finally:
        RDLogger.EnableLog("rdApp.*")
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    return mol


def parse_smiles(smiles: Iterable[str], what: str = "input") -> tuple[list[str], list[Chem.Mol], list[int]]:
    """Canonical keys and molecules (atoms in key order) of the valid SMILES, in input order.

    Returns ``(keys, mols, kept)``: ``kept[j]`` is the input position of ``keys[j]``. Invalid
    SMILES are skipped and counted in one warning that names a few of them, so a run never dies
    halfway on one bad molecule. Duplicates are kept (callers decide).
    """
    keys, mols, kept, bad = [], [], [], []
    for i, s in enumerate(smiles):
        mol = mol_from_smiles(s)
        if mol is None:
            bad.append(s)
            continue
        key = Chem.MolToSmiles(mol)
        keys.append(key)
        mols.append(Chem.MolFromSmiles(key))
        kept.append(i)
    if bad:
        shown = ", ".join(repr(s) for s in bad[:3])
        warnings.warn(
            f"{what}: skipped {len(bad)} invalid SMILES of {len(bad) + len(keys)} (e.g. {shown})",
            stacklevel=2,
        )
    return keys, mols, kept


def read_smiles_file(path: str | Path, limit: int = 0) -> list[str]:
    """SMILES strings from a ``.smi``/``.txt`` file (first field of each line) or a ``.csv``.

    A CSV needs one of the columns in ``SMILES_COLUMNS``. ``limit > 0`` keeps the first ``limit``.
    """
    path = user_path(path)
    if not path.is_file():
        raise UserError(f"SMILES file {path} does not exist")
    out: list[str] = []
    if path.suffix.lower() == ".csv":
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            column = next((c for c in SMILES_COLUMNS if c in (reader.fieldnames or [])), None)
            if column is None:
                raise UserError(
                    f"{path}: no SMILES column; expected one of {', '.join(SMILES_COLUMNS)}, "
                    f"found {', '.join(reader.fieldnames or [])}"
                )
            for row in reader:
                out.append(row[column])
                if limit and len(out) >= limit:
                    break
        return out
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0].startswith("#") or fields[0].lower() == "smiles":
                continue
            out.append(fields[0])
            if limit and len(out) >= limit:
                break
    return out


def murcko_scaffold(smiles: str) -> str | None:
    """The Bemis-Murcko scaffold SMILES (no chirality), as TDC and Chemprop compute it."""
    mol = mol_from_smiles(smiles)
    if mol is None:
        return None
    return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


def boltz_atom_names(key: str) -> list[str]:
    """The names Boltz gives the heavy atoms of a SMILES ligand, in atom order of ``key``.

    Boltz's SMILES parser adds hydrogens and names each atom by its element and its canonical
    rank among all atoms (``C7``, ``O12``). Recomputed here so that the teacher can map Boltz's
    atoms back to RDKit atom indices by name, not by trusting an order.
    """
    mol = Chem.AddHs(Chem.MolFromSmiles(key))
    ranks = Chem.CanonicalRankAtoms(mol)
    return [
        atom.GetSymbol().upper() + str(rank + 1)
        for atom, rank in zip(mol.GetAtoms(), ranks)
        if atom.GetAtomicNum() != 1
    ]
