"""The Boltz-2 teacher end to end on a CPU, through the real boltz package in .venv-boltz.

A randomly initialized ``Boltz2`` (boltz's own model class, small configuration) is saved as a
Lightning checkpoint; the teacher command loads it, runs boltz's SMILES parser, tokenizer,
featurizer and trunk on a few ligands and writes the store. Checked: shapes, atom mapping to
RDKit indices, determinism, that an interrupted run resumes to the same store, that the Ray job
writes the same store, and each layer's shape and linearity in the raw inputs.
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
from trainers.boltz_distill.embedding_store import EmbeddingStore

REPO = Path(__file__).resolve().parents[3]
BOLTZ_PYTHON = Path(os.environ.get("RAYLAB_BOLTZ_PYTHON", REPO / ".venv-boltz" / "bin" / "python"))

pytestmark = pytest.mark.skipif(
    not BOLTZ_PYTHON.is_file(),
    reason=f"the boltz environment is absent ({BOLTZ_PYTHON}); 'make boltz-env' creates it",
)

SMILES = [
    "OCC(=O)[O-]",  # written in a non-canonical atom order, charged
    "c1ccccc1C(=O)N",
    "not a molecule",  # skipped, counted
    "CC(C)Cc1ccc(cc1)[C@@H](C)C(=O)O",  # ibuprofen, a stereocentre
]

SCRIPT = r"""
import json, sys
from trainers.boltz_distill.teacher import cli
from trainers.boltz_distill.teacher.boltz2 import Boltz2Teacher
from trainers.boltz_distill.chem import canonical_smiles

tmp, smi = sys.argv[1], sys.argv[2]
ckpt = f"{tmp}/small.ckpt"
common = ["--teacher", "boltz2", "--checkpoint", ckpt, "--smiles", smi, "--recycling-steps", "1",
          "--shard-size", "1"]
out = {"ckpt": cli.main(["--write-random-checkpoint", ckpt])}
out["full"] = cli.main(common + ["--out", f"{tmp}/full"])
out["part"] = cli.main(common + ["--out", f"{tmp}/resumed", "--limit", "2"])   # interrupted
out["rest"] = cli.main(common + ["--out", f"{tmp}/resumed"])                   # resumed
out["atom"] = cli.main(common + ["--out", f"{tmp}/atom", "--layer", "atom_attention", "--limit", "1"])
t = Boltz2Teacher(ckpt, layer="trunk_s", recycling_steps=1)
out["mapping"] = {}
for s in ["OCC(=O)[O-]", "c1ccccc1C(=O)N"]:
    emb, mapping = t.embed(canonical_smiles(s))
    mapping.pop("raw_inputs")
    out["mapping"][canonical_smiles(s)] = {**mapping, "embedding": emb.tolist()}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.long
def test_boltz2_teacher_store_shapes_mapping_determinism_resume_and_ray_job(tmp_path):
    smi = tmp_path / "ligands.smi"
    smi.write_text("\n".join(SMILES) + "\n")
    proc = subprocess.run(
        [str(BOLTZ_PYTHON), "-c", SCRIPT, str(tmp_path), str(smi)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
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

    # The Ray job (a local Ray, CPU tasks of 2 molecules, from the main environment) writes what
    # the single-process command wrote, and resumes without redoing finished chunks.
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    job = [
        sys.executable,
        "-m",
        "trainers.boltz_distill.teacher",
        "--teacher",
        "boltz2",
        "--checkpoint",
        str(tmp_path / "small.ckpt"),
        "--smiles",
        str(smi),
        "--recycling-steps",
        "1",
        "--out",
        str(tmp_path / "job"),
        "--address",
        "local",
        "--gpus-per-task",
        "0",
        "--chunk-size",
        "2",
        "--boltz-python",
        str(BOLTZ_PYTHON),
    ]
    first = subprocess.run(job + ["--limit", "2"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    rest = subprocess.run(job, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert "1 written, 2 already there, 0 failed" in rest.stdout, rest.stdout
    assert "boltz2 trunk_s" in rest.stderr and "3/3" in rest.stderr  # the progress bar
    job_store = EmbeddingStore(tmp_path / "job")
    assert sorted(job_store.keys()) == sorted(keys) and job_store.meta == full.meta
    for key in keys:
        assert np.array_equal(job_store[key], full[key])


LAYER_SCRIPT = r"""
import json, sys
import numpy as np, torch
torch.set_num_threads(1)
from trainers.boltz_distill.teacher.boltz2 import (
    LAYERS, Boltz2Teacher, small_hparams, small_overrides, write_random_checkpoint,
)
from trainers.boltz_distill.chem import canonical_smiles, nci_smiles_path, read_smiles_file

tmp, n = sys.argv[1], int(sys.argv[2])
smiles = [k for k in map(canonical_smiles, read_smiles_file(nci_smiles_path(), limit=n)) if k]
out = {}
for label, redraw, seed in (("redrawn0", True, 0), ("redrawn1", True, 1), ("boltz_init", False, 0)):
    ckpt = write_random_checkpoint(f"{tmp}/{label}.ckpt", seed=seed, redraw=redraw, hparams=small_hparams())
    for layer in LAYERS:
        t = Boltz2Teacher(ckpt, layer=layer, recycling_steps=1, overrides=small_overrides(1))
        xs, ys, shapes_ok = [], [], True
        for key in smiles:
            emb, mapping = t.embed(key)
            shapes_ok &= emb.shape == (len(mapping["names"]), t.dim)
            xs.append(mapping["raw_inputs"])
            ys.append(emb)
        x, y = np.concatenate(xs), np.concatenate(ys).astype(np.float64)
        a = np.concatenate([x, np.ones((len(x), 1))], 1).astype(np.float64)
        w = np.linalg.lstsq(a, y, rcond=None)[0]
        r2 = 1 - ((y - a @ w) ** 2).sum() / ((y - y.mean(0)) ** 2).sum()
        out[f"{label}/{layer}"] = {"r2": float(r2), "dim": t.dim, "atoms": len(y), "shapes_ok": bool(shapes_ok),
                                   "rank": int(np.linalg.matrix_rank(a))}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_boltz2_layers_shapes_and_linear_fit_from_raw_inputs(tmp_path):
    """Each layer's shape, and how much of it a least-squares map from the raw atom inputs explains.

    On the real ``Boltz2`` class (``small_hparams``: 2 Pairformer blocks, loaded with its own
    architecture, ``small_overrides``, 7x faster than the 64-block stand-in) with every weight matrix redrawn
    (Boltz's own init zeroes its blocks' output projections, making them identities, which the
    third checkpoint shows): ``atom_input`` is a linear map of the raw inputs (R^2 = 1), the
    learned layers are not. R^2 is in-sample over all atoms of 20 NCI molecules (some 300
    atoms, against an input rank of about 35).
    """
    proc = subprocess.run(
        [str(BOLTZ_PYTHON), "-c", LAYER_SCRIPT, str(tmp_path), "20"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    print(json.dumps(result, indent=1))
    for name, row in result.items():
        assert row["shapes_ok"], name
        assert row["dim"] == (16 if name.split("/")[1] in ("atom_attention", "atom_input") else 32), name
        assert row["atoms"] > 5 * row["rank"], name  # enough atoms for an in-sample R^2 to mean something
    for label in ("redrawn0", "redrawn1"):
        r2 = {
            layer: result[f"{label}/{layer}"]["r2"] for layer in ("atom_input", "atom_attention", "s_inputs", "trunk_s")
        }
        assert r2["atom_input"] > 0.9999, r2  # exactly linear, up to float32
        assert r2["atom_attention"] < 0.95, r2  # the atom transformer adds what no linear map has
        assert r2["trunk_s"] < r2["atom_attention"] - 0.1, r2  # and the trunk far more
    # at Boltz's own (zero-output) initialization the atom transformer is the identity
    assert result["boltz_init/atom_attention"]["r2"] > 0.999


def test_teacher_cli_refuses_boltz_without_checkpoint(tmp_path):
    proc = subprocess.run(
        [
            str(BOLTZ_PYTHON),
            "-m",
            "trainers.boltz_distill.teacher",
            "--teacher",
            "boltz2",
            "--out",
            str(tmp_path / "s"),
            "--limit",
            "1",
            "--allow-missing-tests",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
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
        [
            sys.executable,
            "-m",
            "trainers.boltz_distill.teacher",
            "--teacher",
            "boltz2",
            "--checkpoint",
            str(tmp_path / "x.ckpt"),
            "--out",
            str(tmp_path / "s"),
            "--limit",
            "1",
            "--allow-missing-tests",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "make boltz-env" in proc.stderr


LOAD_SCRIPT = r"""
import argparse, json, sys
import torch
torch.set_num_threads(1)
from boltz.model.models.boltz2 import Boltz2
from omegaconf import DictConfig, OmegaConf
from raylab.errors import UserError
from trainers.boltz_distill.chem import canonical_smiles
from trainers.boltz_distill.teacher import cli
from trainers.boltz_distill.teacher.boltz2 import (
    Boltz2Teacher, load_boltz2, predict_overrides, small_hparams, small_overrides, write_random_checkpoint,
)

tmp = sys.argv[1]
out = {}
standin = write_random_checkpoint(f"{tmp}/standin.ckpt", seed=0, redraw=True)
raw = torch.load(standin, weights_only=False)
out["keys"] = sorted(raw)
hp = raw["hyper_parameters"]
out["omegaconf"] = sorted(k for k, v in hp.items() if isinstance(v, DictConfig))
out["ckpt_dropout"] = hp["pairformer_args"]["dropout"]
try:  # control: the file really pickles OmegaConf objects
    torch.load(standin, weights_only=True)
    out["plain_weights_only"] = "loaded"
except Exception as err:
    out["plain_weights_only"] = type(err).__name__

ours = load_boltz2(standin)  # weights_only=True with the OmegaConf allowlist
ref = Boltz2.load_from_checkpoint(standin, strict=True, map_location="cpu", **predict_overrides())
ref.eval()
plain = lambda h: {k: OmegaConf.to_container(v) if isinstance(v, DictConfig) else v for k, v in dict(h).items()}
out["hparams_equal"] = plain(ours.hparams) == plain(ref.hparams)
out["hparams_diff"] = sorted(k for k in plain(ref.hparams) if plain(ours.hparams).get(k) != plain(ref.hparams)[k])
out["loaded_dropout"] = ours.hparams["pairformer_args"]["dropout"]
out["loaded_blocks"] = len(ours.pairformer_module.layers)
a, b = ours.state_dict(), ref.state_dict()
out["state_equal"] = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
out["state_is_file"] = all(torch.equal(a[k], raw["state_dict"][k]) for k in raw["state_dict"])
teacher = Boltz2Teacher(standin, recycling_steps=1)
key = canonical_smiles("c1ccccc1C(=O)N")
batch, _ = teacher.features(key)
with torch.no_grad():
    s_ours = teacher.model(batch, recycling_steps=1)["s"]
    ref.skip_run_structure, ref.confidence_prediction, ref.affinity_prediction = True, False, False
    s_ref = ref(batch, recycling_steps=1)["s"]
out["s_equal"] = bool(torch.equal(s_ours, s_ref)) and float(s_ours.std()) > 0

# boltz predict's keyword arguments replace the checkpoint's nested ones whole: a 2-block
# checkpoint does not load with them, through Lightning or here; with its own architecture it does
tiny = write_random_checkpoint(f"{tmp}/tiny.ckpt", seed=0, hparams=small_hparams())
try:
    Boltz2.load_from_checkpoint(tiny, strict=True, map_location="cpu", **predict_overrides())
    out["tiny_lightning"] = "loaded"
except RuntimeError as err:
    out["tiny_lightning"] = "RuntimeError"
try:
    load_boltz2(tiny)
    out["tiny_ours"] = "loaded"
except UserError as err:
    out["tiny_ours"] = str(err)
out["tiny_own_arch"] = len(load_boltz2(tiny, overrides=small_overrides()).pairformer_module.layers)

# anything but OmegaConf's data classes is refused, named, unless trusted
raw["hyper_parameters"]["run_args"] = argparse.Namespace(seed=1)
torch.save(raw, f"{tmp}/extra.ckpt")
try:
    load_boltz2(f"{tmp}/extra.ckpt")
    out["extra"] = "loaded"
except UserError as err:
    out["extra"] = str(err)
out["extra_trusted"] = len(load_boltz2(f"{tmp}/extra.ckpt", trust_checkpoint=True).pairformer_module.layers)

# the teacher command on the stand-in, without --trust-checkpoint
with open(f"{tmp}/one.smi", "w") as f:
    f.write("c1ccccc1C(=O)N\n")
out["cli"] = cli.main(["--teacher", "boltz2", "--checkpoint", str(standin), "--smiles", f"{tmp}/one.smi",
                       "--recycling-steps", "1", "--out", f"{tmp}/store", "--allow-missing-tests"])
print("RESULT " + json.dumps(out, default=str))
"""


@pytest.mark.slow
def test_training_style_checkpoint_loads_as_boltz_predict_loads_it(tmp_path):
    """A stand-in written by Lightning's ``Trainer.save_checkpoint`` with OmegaConf hyperparameters
    (as boltz's Hydra training writes ``boltz2_conf.ckpt``) loads through ``load_boltz2`` to the
    same model ``Boltz2.load_from_checkpoint`` builds with ``boltz predict``'s arguments: same
    merged hyperparameters, same weights, same trunk output; without full unpickling."""
    proc = subprocess.run(
        [str(BOLTZ_PYTHON), "-c", LOAD_SCRIPT, str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    print(json.dumps(r, indent=1))
    # the stand-in is a Trainer checkpoint whose nested hyperparameters are OmegaConf objects
    assert {"loops", "optimizer_states", "lr_schedulers", "pytorch-lightning_version"} <= set(r["keys"])
    assert {"pairformer_args", "msa_args", "training_args"} <= set(r["omegaconf"])
    assert r["plain_weights_only"] == "UnpicklingError"  # control: torch's default allowlist refuses it
    # the same model as boltz predict's path
    assert r["hparams_equal"], r["hparams_diff"]
    assert r["ckpt_dropout"] == 0.25 and r["loaded_dropout"] == 0.0  # predict's pairformer_args won
    assert r["loaded_blocks"] == 64
    assert r["state_equal"] and r["state_is_file"] and r["s_equal"]
    # merge order: predict's arguments replace the checkpoint's nested ones whole
    assert r["tiny_lightning"] == "RuntimeError"
    assert "boltz predict's arguments do not build this checkpoint's model" in r["tiny_ours"]
    assert r["tiny_own_arch"] == 2
    assert "argparse.Namespace" in r["extra"] and "--trust-checkpoint" in r["extra"]
    assert r["extra_trusted"] == 64
    assert r["cli"] == 0
