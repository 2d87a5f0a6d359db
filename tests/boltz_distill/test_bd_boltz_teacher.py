"""The Boltz-2 teacher end to end on a CPU, through the real boltz package in .venv-boltz.

A randomly initialized ``Boltz2`` (boltz's own model class, small configuration) is saved as a
Lightning checkpoint; the teacher command loads it, runs boltz's SMILES parser, tokenizer,
featurizer and trunk on a few ligands and writes the store. Checked: shapes, atom mapping to
RDKit indices, determinism, and that an interrupted run resumes to the same store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem

from trainers.boltz_distill.chem import boltz_atom_names, canonical_smiles
from trainers.boltz_distill.store import EmbeddingStore

REPO = Path(__file__).resolve().parents[2]
BOLTZ_PYTHON = Path(os.environ.get("RAYLAB_BOLTZ_PYTHON", REPO / ".venv-boltz" / "bin" / "python"))

pytestmark = pytest.mark.skipif(
    not BOLTZ_PYTHON.is_file(),
    reason=f"the boltz environment is absent ({BOLTZ_PYTHON}); 'make boltz-env' creates it",
)

SMILES = [
    "OCC(=O)[O-]",                   # written in a non-canonical atom order, charged
    "c1ccccc1C(=O)N",
    "not a molecule",                # skipped, counted
    "CC(C)Cc1ccc(cc1)[C@@H](C)C(=O)O",  # ibuprofen, a stereocentre
]

SCRIPT = r"""
import json, sys
from trainers.boltz_distill import teacher
from trainers.boltz_distill.boltz_teacher import Boltz2Teacher
from trainers.boltz_distill.chem import canonical_smiles

tmp, smi = sys.argv[1], sys.argv[2]
ckpt = f"{tmp}/small.ckpt"
common = ["--teacher", "boltz2", "--checkpoint", ckpt, "--smiles", smi, "--recycling-steps", "1",
          "--shard-size", "1"]
out = {"ckpt": teacher.main(["--write-random-checkpoint", ckpt])}
out["full"] = teacher.main(common + ["--out", f"{tmp}/full"])
out["part"] = teacher.main(common + ["--out", f"{tmp}/resumed", "--limit", "2"])   # interrupted
out["rest"] = teacher.main(common + ["--out", f"{tmp}/resumed"])                   # resumed
out["atom"] = teacher.main(common + ["--out", f"{tmp}/atom", "--layer", "atom_encoder", "--limit", "1"])
t = Boltz2Teacher(ckpt, layer="trunk_s", recycling_steps=1)
out["mapping"] = {}
for s in ["OCC(=O)[O-]", "c1ccccc1C(=O)N"]:
    emb, mapping = t.embed(canonical_smiles(s))
    out["mapping"][canonical_smiles(s)] = {**mapping, "embedding": emb.tolist()}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_boltz2_teacher_store_shapes_mapping_determinism_resume(tmp_path):
    smi = tmp_path / "ligands.smi"
    smi.write_text("\n".join(SMILES) + "\n")
    proc = subprocess.run(
        [str(BOLTZ_PYTHON), "-c", SCRIPT, str(tmp_path), str(smi)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert all(result[k] == 0 for k in ("ckpt", "full", "part", "rest", "atom")), result
    assert "skipped 1 invalid SMILES of 4" in proc.stderr
    assert "1 written, 2 already there" in proc.stdout  # the resumed run did only the rest

    keys = [k for k in map(canonical_smiles, SMILES) if k]
    full, resumed = EmbeddingStore(tmp_path / "full"), EmbeddingStore(tmp_path / "resumed")
    assert sorted(full.keys()) == sorted(keys) and sorted(resumed.keys()) == sorted(keys)
    assert full.meta["teacher"] == "boltz2" and full.meta["settings"]["layer"] == "trunk_s"
    for key in keys:
        mol = Chem.MolFromSmiles(key)
        emb = full[key]
        assert emb.shape == (mol.GetNumAtoms(), 32) and emb.dtype == np.float16  # token_s = 32
        assert np.isfinite(emb.astype(np.float32)).all() and emb.std() > 0
        assert np.array_equal(emb, resumed[key])  # deterministic, and resuming changes nothing

    atom = EmbeddingStore(tmp_path / "atom")
    (key,) = atom.keys()
    assert atom[key].shape == (Chem.MolFromSmiles(key).GetNumAtoms(), 16)  # atom_s = 16

    for key, mapping in result["mapping"].items():
        mol = Chem.MolFromSmiles(key)
        # row i is RDKit atom i of the key: boltz's name and element for that row agree
        assert mapping["names"] == boltz_atom_names(key)
        assert mapping["elements"] == [a.GetAtomicNum() for a in mol.GetAtoms()]
        stored = full[key].astype(np.float32)
        assert np.allclose(np.array(mapping["embedding"]), stored, atol=2e-2, rtol=1e-2)
    # the atoms of the charged, non-canonically written glycolate are not all alike
    glycolate = full[canonical_smiles("OCC(=O)[O-]")].astype(np.float32)
    assert len({tuple(np.round(r, 3)) for r in glycolate}) == glycolate.shape[0]


def test_teacher_cli_refuses_boltz_without_checkpoint(tmp_path):
    proc = subprocess.run(
        [str(BOLTZ_PYTHON), "-m", "trainers.boltz_distill.teacher", "--teacher", "boltz2",
         "--out", str(tmp_path / "s"), "--limit", "1"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2 and "needs --checkpoint" in proc.stderr


def test_main_environment_reports_missing_boltz(tmp_path):
    """In the main environment (no boltz) the command says where boltz lives instead of crashing."""
    try:
        import boltz  # noqa: F401
        pytest.skip("boltz is importable here")
    except ImportError:
        pass
    proc = subprocess.run(
        [sys.executable, "-m", "trainers.boltz_distill.teacher", "--teacher", "boltz2",
         "--checkpoint", str(tmp_path / "x.ckpt"), "--out", str(tmp_path / "s"), "--limit", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2 and "make boltz-env" in proc.stderr
