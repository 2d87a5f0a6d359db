"""The RDKit teachers (conformer, descriptors) through the teacher command and the store."""

from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import Crippen, Descriptors

from trainers.boltz_distill.embedding_store import EmbeddingStore
from trainers.boltz_distill.teacher import cli, rdkit_teachers

SMILES = ["CC(=O)Oc1ccccc1C(=O)O", "OCC(=O)[O-]", "c1ccncc1", "nonsense", "CCO"]


def inverse_signed_log(y):
    return np.sign(y) * np.expm1(np.abs(y))


def test_descriptor_teacher_values(tmp_path):
    smi = tmp_path / "m.smi"
    smi.write_text("\n".join(SMILES))
    with pytest.warns(UserWarning, match="skipped 1 invalid SMILES of 5"):
        assert cli.main(["--teacher", "descriptors", "--smiles", str(smi), "--out", str(tmp_path / "d")]) == 0
    store = EmbeddingStore(tmp_path / "d")
    assert len(store) == 4 and store.dim == rdkit_teachers.DESCRIPTOR_DIM
    aspirin = Chem.MolFromSmiles("CC(=O)Oc1ccccc1C(=O)O")
    emb = store[Chem.MolToSmiles(aspirin)].astype(np.float64)
    key_mol = Chem.MolFromSmiles(Chem.MolToSmiles(aspirin))
    assert emb.shape == (13, rdkit_teachers.DESCRIPTOR_DIM)
    # per-atom Crippen logP contributions add up to RDKit's MolLogP (float16 rounding aside)
    assert inverse_signed_log(emb[:, 0]).sum() == pytest.approx(Crippen.MolLogP(key_mol), abs=0.05)
    # molecule descriptors are broadcast: every atom row carries the molecular weight
    mw_col = 6 + rdkit_teachers.DESCRIPTOR_NAMES.index("MolWt")
    assert np.allclose(inverse_signed_log(emb[:, mw_col]), Descriptors.MolWt(key_mol), rtol=2e-3)


def test_conformer_teacher_deterministic_resumable_and_consistent(tmp_path):
    smi = tmp_path / "m.smi"
    smi.write_text("\n".join(SMILES))
    args = ["--teacher", "conformer", "--smiles", str(smi), "--num-conformers", "1", "--shard-size", "2"]
    with pytest.warns(UserWarning):
        cli.main(args + ["--out", str(tmp_path / "a")])
        cli.main(args + ["--out", str(tmp_path / "b"), "--limit", "2"])  # interrupted ...
        cli.main(args + ["--out", str(tmp_path / "b")])  # ... and resumed
    a, b = EmbeddingStore(tmp_path / "a"), EmbeddingStore(tmp_path / "b")
    assert sorted(a.keys()) == sorted(b.keys()) and len(a) == 4
    for key in a.keys():
        assert a[key].shape == (Chem.MolFromSmiles(key).GetNumAtoms(), rdkit_teachers.CONFORMER_DIM)
        assert np.array_equal(a[key], b[key])
    emb = rdkit_teachers.conformer_features(Chem.MolFromSmiles("c1ccncc1"), num_conformers=1, seed=0)
    to_centroid, gyration = emb[:, -6], emb[:, -2]
    assert gyration == pytest.approx(np.full(6, np.sqrt((to_centroid**2).mean())), rel=1e-5)
    # a flat ring: every atom sees the 5 others; the neighbours at 1.4 A light the first centres
    radial = emb[:, : 4 * len(rdkit_teachers.RBF_CENTERS)].reshape(6, 4, -1)
    assert np.allclose(radial.sum(axis=(1, 2)), radial.sum(axis=(1, 2))[0], rtol=0.05)


def test_rdkit_store_parallel_matches_serial(tmp_path):
    smiles = SMILES[:3] + ["CCN", "CCCl", "C1CCCCC1"]
    rdkit_teachers.build_rdkit_store("descriptors", smiles, str(tmp_path / "s"), workers=1)
    rdkit_teachers.build_rdkit_store("descriptors", smiles, str(tmp_path / "p"), workers=2)
    s, p = EmbeddingStore(tmp_path / "s"), EmbeddingStore(tmp_path / "p")
    assert sorted(s.keys()) == sorted(p.keys())
    assert all(np.array_equal(s[k], p[k]) for k in s.keys())
