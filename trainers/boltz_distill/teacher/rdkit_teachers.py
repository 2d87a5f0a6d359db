"""The RDKit teachers of the complementary-supervision study, and store building for any teacher.

Both teachers give one vector per heavy atom, in the store's atom order, so a student distils
from them exactly as from Boltz-2 (and from several at once, by concatenation):

- ``conformer``: 3D geometry from RDKit ETKDGv3 conformers relaxed with MMFF94. Per atom:
  Gaussian radial features of its distances to the other heavy atoms, split by element
  (C, N, O, other: 4 x ``RBF_CENTERS``), its distance to the centroid, its count of atoms
  (hydrogens included) within 3 and 5 angstrom, its MMFF94 partial charge, and, broadcast to
  every atom, the radius of gyration and the MMFF energy per heavy atom. Averaged over
  ``num_conformers`` conformers (seeded: the same molecule always gives the same vector).
- ``descriptors``: RDKit descriptors. Per atom: its Crippen logP and molar-refractivity
  contributions (its hydrogens' included), TPSA and Labute ASA contributions, EState index and Gasteiger charge; then all
  of RDKit's molecule descriptors (``Descriptors.descList``) broadcast to every atom. Every
  value goes through ``sign(x) * log1p(|x|)`` so that descriptors of very different scales fit
  in float16 and none dominates; students standardize targets per dimension anyway.
"""

from __future__ import annotations

import math
import multiprocessing
import sys
import time
import warnings
from typing import Any, Callable, Iterable

import numpy as np
from rdkit import Chem, RDLogger
from rdkit.Chem import AllChem, Descriptors, rdMolDescriptors
from rdkit.Chem.EState import EState

from trainers.boltz_distill.chem import parse_smiles
from trainers.boltz_distill.embedding_store import StoreWriter

RBF_CENTERS = np.linspace(1.0, 8.0, 8)
"""Centers (angstrom) of the Gaussian radial features of the conformer teacher."""
RBF_WIDTH = 1.0
"""Width (angstrom) of each Gaussian."""
ELEMENT_GROUPS = {6: 0, 7: 1, 8: 2}
"""Atomic number to radial-feature group; every other element is group 3."""
CONFORMER_DIM = 4 * len(RBF_CENTERS) + 6
DESCRIPTOR_NAMES = [name for name, _ in Descriptors.descList]
DESCRIPTOR_DIM = 6 + len(DESCRIPTOR_NAMES)


class TeacherFailure(Exception):
    """This teacher cannot embed this molecule (recorded in the store, not fatal)."""


def signed_log(x: np.ndarray) -> np.ndarray:
    """``sign(x) * log1p(|x|)``: keeps sign and order, compresses large magnitudes."""
    return np.sign(x) * np.log1p(np.abs(x))


def conformer_features(mol: Chem.Mol, num_conformers: int = 4, seed: int = 0) -> np.ndarray:
    """The conformer teacher's [heavy atoms, CONFORMER_DIM] features of one molecule."""
    n = mol.GetNumAtoms()
    mol_h = Chem.AddHs(mol)
    params = AllChem.ETKDGv3()
    params.randomSeed = seed
    conf_ids = list(AllChem.EmbedMultipleConfs(mol_h, numConfs=num_conformers, params=params))
    if not conf_ids:
        params.useRandomCoords = True
        conf_ids = list(AllChem.EmbedMultipleConfs(mol_h, numConfs=num_conformers, params=params))
    if not conf_ids:
        raise TeacherFailure("ETKDG found no conformer")
    mmff = AllChem.MMFFGetMoleculeProperties(mol_h)
    if mmff is None:
        raise TeacherFailure("no MMFF94 parameters")
    results = AllChem.MMFFOptimizeMoleculeConfs(mol_h, maxIters=500)
    charges = np.array([mmff.GetMMFFPartialCharge(i) for i in range(n)])
    groups = np.array([ELEMENT_GROUPS.get(a.GetAtomicNum(), 3) for a in mol.GetAtoms()])
    feats = []
    for conf_id, (_, energy) in zip(conf_ids, results):
        pos_all = mol_h.GetConformer(conf_id).GetPositions()
        pos = pos_all[:n]  # heavy atoms come first after AddHs
        dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        rbf = np.exp(-((dist[..., None] - RBF_CENTERS) ** 2) / RBF_WIDTH**2)  # [n, n, K]
        np.einsum("iik->ik", rbf)[:] = 0.0  # no self term
        by_group = np.zeros((n, 4, len(RBF_CENTERS)))
        for g in range(4):
            by_group[:, g] = rbf[:, groups == g].sum(axis=1)
        centroid = pos.mean(axis=0)
        to_centroid = np.linalg.norm(pos - centroid, axis=1)
        dist_all = np.linalg.norm(pos[:, None] - pos_all[None], axis=-1)
        near3 = (dist_all < 3.0).sum(axis=1) - 1
        near5 = (dist_all < 5.0).sum(axis=1) - 1
        gyration = math.sqrt(float((to_centroid**2).mean()))
        feats.append(
            np.concatenate(
                [
                    by_group.reshape(n, -1),
                    to_centroid[:, None],
                    near3[:, None],
                    near5[:, None],
                    charges[:, None],
                    np.full((n, 1), gyration),
                    np.full((n, 1), signed_log(np.array(energy / n))),
                ],
                axis=1,
            )
        )
    out = np.mean(feats, axis=0).astype(np.float32)
    assert out.shape == (n, CONFORMER_DIM)
    return out


def descriptor_features(mol: Chem.Mol) -> np.ndarray:
    """The descriptor teacher's [heavy atoms, DESCRIPTOR_DIM] features of one molecule."""
    n = mol.GetNumAtoms()
    # Crippen logP / MR contributions with each hydrogen's share folded into its heavy atom,
    # so that a molecule's rows add up to MolLogP / MolMR
    mol_h = Chem.AddHs(mol)
    contribs = np.array(rdMolDescriptors._CalcCrippenContribs(mol_h))
    crippen = contribs[:n].copy()
    for atom in mol_h.GetAtoms():
        if atom.GetIdx() >= n:
            crippen[atom.GetNeighbors()[0].GetIdx()] += contribs[atom.GetIdx()]
    tpsa = np.array(rdMolDescriptors._CalcTPSAContribs(mol))
    asa = np.array(rdMolDescriptors._CalcLabuteASAContribs(mol)[0])
    estate = np.array(EState.EStateIndices(mol))
    work = Chem.Mol(mol)
    AllChem.ComputeGasteigerCharges(work)
    gasteiger = np.array([a.GetDoubleProp("_GasteigerCharge") for a in work.GetAtoms()])
    per_atom = np.column_stack([crippen, tpsa, asa, estate, gasteiger])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = Descriptors.CalcMolDescriptors(mol, missingVal=0.0)
    whole = np.array([values[name] for name in DESCRIPTOR_NAMES], dtype=np.float64)
    out = np.concatenate([per_atom, np.broadcast_to(whole, (n, len(whole)))], axis=1)
    out = signed_log(np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0))
    return out.astype(np.float32)


def rdkit_teacher(name: str, num_conformers: int = 4, seed: int = 0) -> tuple[Callable, int, dict]:
    """``(embed(mol) -> [atoms, dim], dim, settings)`` of an RDKit teacher by name."""
    if name == "conformer":
        settings = {
            "teacher": "conformer",
            "settings": {
                "num_conformers": num_conformers,
                "seed": seed,
                "rbf_centers": RBF_CENTERS.tolist(),
                "force_field": "MMFF94",
                "embedding": "ETKDGv3",
            },
        }
        return (lambda mol: conformer_features(mol, num_conformers, seed)), CONFORMER_DIM, settings
    if name == "descriptors":
        settings = {"teacher": "descriptors", "settings": {"names": DESCRIPTOR_NAMES}}
        return descriptor_features, DESCRIPTOR_DIM, settings
    raise ValueError(f"unknown RDKit teacher {name!r}; choose conformer or descriptors")


_WORKER: dict[str, Any] = {}


def _init_worker(name: str, num_conformers: int, seed: int) -> None:
    RDLogger.DisableLog("rdApp.*")
    _WORKER["embed"] = rdkit_teacher(name, num_conformers, seed)[0]


def _embed_one(key: str) -> tuple[str, np.ndarray | None, str]:
    try:
        return key, _WORKER["embed"](Chem.MolFromSmiles(key)), ""
    except Exception as err:  # noqa: BLE001 - one molecule must not stop the run
        return key, None, f"{type(err).__name__}: {err}"


def build_rdkit_store(
    name: str,
    smiles: Iterable[str],
    out: str,
    num_conformers: int = 4,
    seed: int = 0,
    workers: int = 1,
    shard_size: int = 1000,
    log_every: float = 30.0,
) -> dict[str, int]:
    """Embed every molecule of ``smiles`` with an RDKit teacher into the store at ``out``.

    Resumes: molecules already in the store are skipped. Returns counts (written, skipped,
    failed, invalid).
    """
    keys, _, _ = parse_smiles(smiles, what=f"{name} teacher input")
    _, dim, meta = rdkit_teacher(name, num_conformers, seed)
    counts = {"written": 0, "skipped": 0, "failed": 0}
    with StoreWriter(out, dim, meta, shard_size=shard_size) as writer:
        todo = []
        for key in dict.fromkeys(keys):
            if key in writer:
                counts["skipped"] += 1
            else:
                todo.append(key)
        started = last = time.time()
        if workers > 1 and len(todo) > 1:
            pool = multiprocessing.get_context("spawn").Pool(
                workers, initializer=_init_worker, initargs=(name, num_conformers, seed)
            )
            results = pool.imap(_embed_one, todo, chunksize=16)
        else:
            pool = None
            _init_worker(name, num_conformers, seed)
            results = map(_embed_one, todo)
        try:
            for done, (key, emb, error) in enumerate(results, 1):
                if emb is None:
                    writer.fail(key, error)
                    counts["failed"] += 1
                else:
                    writer.add(key, emb)
                    counts["written"] += 1
                if time.time() - last > log_every:
                    last = time.time()
                    rate = done / (last - started)
                    print(f"{name}: {done}/{len(todo)} molecules, {rate:.1f}/s", file=sys.stderr)
        finally:
            if pool is not None:
                pool.terminate()
    return counts
