"""Unit tests of boltz_distill: featurization, store, splits, metrics, loss, probes, configs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics
import torch
from rdkit import Chem

from raylab.config import from_dict
from raylab.errors import UserError
from raylab.run_folder import RunFolder
from trainers.boltz_distill import chem, data, featurize, loss, probe
from trainers.boltz_distill.config import Config, ProbeConfig
from trainers.boltz_distill.embedding_store import EmbeddingStore, StoreWriter

F = featurize.ATOM_OFFSETS


def one_hot_slots(row: torch.Tensor) -> list[int]:
    return torch.nonzero(row[: F["aromatic"]]).flatten().tolist()


def test_feature_dimensions_match_chemprop():
    assert featurize.ATOM_DIM == 133
    assert featurize.BOND_DIM == 13


def test_ethanol_graph_values():
    graph = featurize.mol_to_graph(Chem.MolFromSmiles("CCO"))
    assert graph.x.shape == (3, 133) and graph.edge_attr.shape == (4, 13)
    assert graph.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    oxygen = graph.x[2]
    assert one_hot_slots(oxygen) == [
        F["atomic_num"] + 7,  # atomic number 8 is the 8th of 1..100
        F["degree"] + 2,  # total degree: C and H
        F["formal_charge"] + 4,  # charge 0 is listed last in (-1, -2, 1, 2, 0)
        F["chiral_tag"] + 0,
        F["num_hs"] + 1,
        F["hybridization"] + 2,  # SP3
    ]
    assert oxygen[F["aromatic"]] == 0
    assert oxygen[F["mass"]] == pytest.approx(15.999 * 0.01, abs=1e-4)
    methyl = graph.x[0]
    assert methyl[F["num_hs"] + 3] == 1 and methyl[F["degree"] + 4] == 1
    single = graph.edge_attr[0]
    assert torch.nonzero(single).flatten().tolist() == [0, 6]  # single bond, stereo none


def test_benzene_aromatic_bond_and_atom():
    graph = featurize.mol_to_graph(Chem.MolFromSmiles("c1ccccc1"))
    assert graph.x[:, F["aromatic"]].tolist() == [1.0] * 6
    assert torch.all(graph.x[:, F["hybridization"] + 1] == 1)  # SP2
    bond = graph.edge_attr[0]
    assert torch.nonzero(bond).flatten().tolist() == [3, 4, 5, 6]  # aromatic, conjugated, ring, none


def test_charge_hydrogens_and_other_slots():
    ammonium = featurize.mol_to_graph(Chem.MolFromSmiles("[NH4+]")).x[0]
    assert ammonium[F["formal_charge"] + 2] == 1 and ammonium[F["num_hs"] + 4] == 1
    sf6 = featurize.mol_to_graph(Chem.MolFromSmiles("FS(F)(F)(F)(F)F")).x[1]
    assert sf6[F["degree"] + 6] == 1  # degree 6 falls in the "other" slot
    assert sf6[F["hybridization"] + 4] == 1  # SP3D2


def test_every_atom_has_six_one_hots_on_nci_sample():
    graphs, keys, kept = featurize.graphs_from_smiles(chem.read_smiles_file(chem.nci_smiles_path(), limit=50))
    assert len(graphs) == 50 and kept == list(range(50))
    for g in graphs:
        assert torch.all(g.x[:, : F["aromatic"]].sum(1) == 6)
        assert g.edge_index.shape[1] == g.edge_attr.shape[0]


def test_invalid_smiles_are_skipped_counted_and_named():
    with pytest.warns(UserWarning, match=r"skipped 2 invalid SMILES of 4 \(e.g. 'C1CC', 'xyz'\)"):
        graphs, keys, kept = featurize.graphs_from_smiles(["CCO", "C1CC", "xyz", "OCC"], what="test")
    assert keys == ["CCO", "CCO"] and kept == [0, 3]
    assert all(g.smiles == "CCO" for g in graphs)


def test_canonical_key_and_atom_order():
    assert chem.canonical_smiles("OCC") == "CCO"
    assert chem.canonical_smiles("not smiles") is None
    # element + canonical rank among all atoms after adding hydrogens, as boltz names them
    # (checked against boltz's own parse: O=C([O-])CO gave O4 C7 O5 C8 O6)
    assert chem.boltz_atom_names("CCO") == ["C8", "C9", "O7"]
    assert chem.boltz_atom_names("O=C([O-])CO") == ["O4", "C7", "O5", "C8", "O6"]


def test_read_smiles_csv_and_smi(tmp_path):
    (tmp_path / "a.smi").write_text("smiles\nCCO 1\n\nc1ccccc1\tx\n")
    (tmp_path / "b.csv").write_text("Drug_ID,Drug,Y\n1,CCO,0.5\n2,CCN,1.0\n")
    assert chem.read_smiles_file(tmp_path / "a.smi") == ["CCO", "c1ccccc1"]
    assert chem.read_smiles_file(tmp_path / "b.csv") == ["CCO", "CCN"]
    (tmp_path / "c.csv").write_text("x,y\n1,2\n")
    with pytest.raises(UserError, match="no SMILES column"):
        chem.read_smiles_file(tmp_path / "c.csv")


# ----------------------------------------------------------------------------- store


def test_store_roundtrip_resume_and_failures(tmp_path):
    root = tmp_path / "store"
    a, b = np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((2, 2), np.float32) * 1e6
    with StoreWriter(root, 2, {"teacher": "t"}, shard_size=2) as w:
        w.add("CCO", a)
        w.fail("bad", "no conformer")
        w.add("CC", b)  # beyond float16: clipped, with a warning at close
    store = EmbeddingStore(root)
    assert sorted(store.keys()) == ["CC", "CCO"] and store.failed == {"bad": "no conformer"}
    assert store["CCO"].dtype == np.float16 and np.array_equal(store["CCO"], a)
    assert store["CC"].max() == np.float16(65504)
    assert sorted(p.name for p in root.iterdir() if p.suffix == ".npy") == ["shard_000000.npy", "shard_000001.npy"]
    # reopen: done keys are skipped, a new shard continues the numbering
    with StoreWriter(root, 2, {"teacher": "t"}, shard_size=2) as w:
        assert "CCO" in w and "bad" in w and "CCN" not in w
        w.add("CCO", a + 1)  # ignored: already stored
        w.add("CCN", a)
    store = EmbeddingStore(root)
    assert len(store) == 3 and np.array_equal(store["CCO"], a) and store.total_rows() == 8
    with pytest.raises(UserError, match="other settings"):
        StoreWriter(root, 2, {"teacher": "other"})
    with pytest.raises(ValueError):
        StoreWriter(tmp_path / "s2", 3, {}).add("C", np.zeros((1, 2)))


def test_store_ignores_a_shard_without_index(tmp_path):
    root = tmp_path / "store"
    with StoreWriter(root, 2, {}) as w:
        w.add("C", np.zeros((1, 2)))
    np.save(root / "shard_000001.npy", np.zeros((5, 2), np.float16))  # killed before its index
    assert EmbeddingStore(root).keys() == ["C"]
    assert json.loads((root / "meta.json").read_text())["dtype"] == "float16"


# ----------------------------------------------------------------------------- scaffold split


def test_scaffold_split_disjoint_deterministic_and_sized():
    smiles = chem.read_smiles_file(chem.nci_smiles_path(), limit=400)
    train, valid = data.scaffold_split(smiles, seed=1)
    assert train == data.scaffold_split(smiles, seed=1)[0]
    assert train != data.scaffold_split(smiles, seed=2)[0]
    assert not set(train) & set(valid)
    scaffolds = lambda idx: {chem.murcko_scaffold(smiles[i]) for i in idx}  # noqa: E731
    assert not scaffolds(train) & scaffolds(valid)
    valid_n = sum(chem.mol_from_smiles(s) is not None for s in smiles)
    assert len(train) + len(valid) == valid_n
    assert len(train) <= int(valid_n * 0.875) and len(train) >= int(valid_n * 0.8)


def test_offline_tasks_load():
    sol = data.load_task("solubility")
    assert len(sol.train_val_smiles) + len(sol.test_smiles) == 1282 and sol.metric == "mae"
    free = data.load_task("freesolv")
    assert len(free.train_val_smiles) + len(free.test_smiles) == 642
    # the held-out set is 20%, not TDC's rule's 49.8% (its one acyclic group, 320 molecules)
    assert len(free.test_smiles) == int(642 * 0.2) == 128
    acyclic = [chem.murcko_scaffold(s) == "" for s in free.test_smiles]
    assert 0.2 < sum(acyclic) / 128 < 0.8  # acyclic and ring molecules both held out
    rings = lambda smiles: {chem.murcko_scaffold(s) for s in smiles} - {""}  # noqa: E731
    assert not rings(free.test_smiles) & rings(free.train_val_smiles)  # no ring scaffold on both sides
    assert data.metric_name("cyp2c9_veith") == "probe/cyp2c9_veith/auprc"
    assert len(data.ADMET_METRICS) == 22


def test_admet_loader_reads_local_tdc_layout(tmp_path):
    folder = tmp_path / "admet_group" / "caco2_wang"
    folder.mkdir(parents=True)
    (folder / "train_val.csv").write_text("Drug_ID,Drug,Y\na,CCO,-5.1\nb,c1ccccc1,-4.2\n")
    (folder / "test.csv").write_text("Drug_ID,Drug,Y\nc,CCN,-6.0\n")
    task = data.load_task("caco2_wang", str(tmp_path))
    assert task.train_val_smiles == ["CCO", "c1ccccc1"] and task.test_y.tolist() == [-6.0]
    with pytest.raises(UserError, match=r"looked for .*herg/train_val.csv"):
        data.load_task("herg", str(tmp_path), download=False)


# ----------------------------------------------------------------------------- metrics


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_match_scipy_and_sklearn(seed):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=200)
    s = np.round(y + rng.normal(size=200), 1)  # rounding makes ties
    labels = (y > 0.3).astype(int)
    assert probe.mae(y, s) == pytest.approx(sklearn.metrics.mean_absolute_error(y, s))
    assert probe.spearman(y, s) == pytest.approx(scipy.stats.spearmanr(y, s)[0])
    assert probe.roc_auc(labels, s) == pytest.approx(sklearn.metrics.roc_auc_score(labels, s))
    assert probe.pr_auc(labels, s) == pytest.approx(sklearn.metrics.average_precision_score(labels, s))
    assert np.allclose(probe.average_ranks(s), scipy.stats.rankdata(s))


def test_metric_hand_values_and_direction():
    assert probe.roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    # thresholds 0.8 (P=1, R=.5), 0.4 (P=.5), 0.35 (P=2/3, R=1): AP = .5*1 + .5*2/3
    assert probe.pr_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.5 + 1 / 3)
    assert probe.better("mae", 0.1, 0.2) and probe.better("roc-auc", 0.9, 0.8)
    assert not probe.better("mae", float("nan"), 0.2)


# ----------------------------------------------------------------------------- loss


def test_distill_loss_hand_computed():
    pred = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    target = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    total, parts = loss.distill_loss(pred, target, mse_weight=2.0, cosine_weight=3.0)
    # squared errors 1 + 1 + 0 + 1 over 4 entries; cosines 0 and 1
    assert parts["mse"].item() == pytest.approx(0.75)
    assert parts["cosine"].item() == pytest.approx(0.5)
    assert total.item() == pytest.approx(2 * 0.75 + 3 * 0.5)
    same, _ = loss.distill_loss(target, target)
    assert same.item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError):
        loss.distill_loss(pred, target[:1])


def test_standardize_with_constant_dimension():
    t = torch.tensor([[1.0, 5.0], [3.0, 5.0]])
    out = loss.standardize(t, t.mean(0), t.std(0, unbiased=False))
    assert out.tolist() == [[-1.0, 0.0], [1.0, 0.0]]


# ----------------------------------------------------------------------------- probes


def test_linear_probes_recover_signal():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 5, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.0, 0.5, 0.0]) + 0.01 * torch.randn(300, generator=g)
    pred, valid, _ = probe.linear_probe(x[:200], y[:200], x[200:250], y[200:250], x[250:], "mae")
    assert probe.mae(y[250:].numpy(), pred) < 0.05 and valid < 0.05
    labels = (y > 0).float()
    pred, valid, _ = probe.linear_probe(x[:200], labels[:200], x[200:250], labels[200:250], x[250:], "roc-auc")
    assert probe.roc_auc(labels[250:].numpy(), pred) > 0.97


def test_gbm_probe_learns_an_interaction_ridge_cannot_and_selects_on_validation():
    """Positive control: y = x0 * x1 (no linear part), which the ridge probe cannot fit."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 4)).astype(np.float32)
    x[:, 3] = 1.0  # a constant column (dropped before boosting)
    y = (x[:, 0] * x[:, 1] + 0.1 * rng.normal(size=500)).astype(np.float32)
    tr, va, te = slice(0, 300), slice(300, 400), slice(400, 500)
    pred, valid, chosen = probe.gbm_probe(x[tr], y[tr], x[va], y[va], x[te], "mae", max_iter=50, seed=0)
    ridge, _, _ = probe.linear_probe(*(torch.from_numpy(a) for a in (x[tr], y[tr], x[va], y[va], x[te])), "mae")
    gbm_mae, ridge_mae = probe.mae(y[te], pred), probe.mae(y[te], ridge)
    assert gbm_mae < 0.6 * ridge_mae, (gbm_mae, ridge_mae)
    assert set(chosen) == {*probe.GBM_GRID, "iterations"} and chosen["iterations"] % probe.GBM_STAGE == 0
    assert all(chosen[k] in probe.GBM_GRID[k] for k in probe.GBM_GRID)
    # the reported validation metric is that of the model chosen on the validation labels
    shuffled = rng.permutation(y[va])
    _, valid_shuffled, _ = probe.gbm_probe(x[tr], y[tr], x[va], shuffled, x[te], "mae", 50, 0)
    assert valid_shuffled > 1.5 * valid  # labels the features do not explain score worse on validation
    labels = (y > 0).astype(np.float32)
    scores, _, _ = probe.gbm_probe(x[tr], labels[tr], x[va], labels[va], x[te], "roc-auc", 50, 0)
    assert ((scores >= 0) & (scores <= 1)).all() and probe.roc_auc(labels[te], scores) > 0.9


# ----------------------------------------------------------------------------- configs


def test_config_validation_names_key():
    with pytest.raises(UserError, match="teachers"):
        from_dict(Config, {"teachers": ["boltz3"]}, "t.yaml", "config")
    with pytest.raises(UserError, match="val_fraction"):
        from_dict(Config, {"val_fraction": 0.7}, "t.yaml", "config")
    with pytest.raises(UserError, match="task"):
        from_dict(ProbeConfig, {"task": "tox21"}, "t.yaml", "config")
    assert from_dict(ProbeConfig, {"task": "ames", "features": "morgan"}, "t.yaml").task == "ames"


def test_probe_preflight_names_what_is_missing(tmp_path):
    from trainers.boltz_distill.probe_loop import preflight

    with pytest.raises(UserError, match="student_checkpoint"):
        preflight(ProbeConfig(features="student"))
    with pytest.raises(UserError, match=r"admet_group/herg/train_val.csv"):
        preflight(ProbeConfig(task="herg", features="morgan", download=False, data_dir=str(tmp_path)))


def test_distill_preflight_without_boltz_store(tmp_path):
    from trainers.boltz_distill.loop import preflight

    with pytest.raises(UserError, match=r"no Boltz-2 store at .*boltz2_trunk_s.*--teacher boltz2"):
        preflight(Config(store_root=str(tmp_path)))
    preflight(Config(teachers=("descriptors",), store_root=str(tmp_path), allow_missing_tests=True))


def test_table_aggregates_seeds_mean_and_population_std(tmp_path, capsys):
    from trainers.boltz_distill import leaderboard, table

    trials = [
        ({"features": "student", "student_teachers": ["descriptors"]}, 1, 0.6, 0),
        ({"features": "student", "student_teachers": ["descriptors"]}, 2, 0.8, 3),
        ({"features": "student", "student_teachers": ["boltz2"], "student_layer": "atom_attention"}, 1, 0.5, 0),
        ({"variant": {"features": "chemprop", "probe": "end_to_end"}}, 1, 1.0, 0),
    ]
    for i, (params, seed, value, imputed) in enumerate(trials):
        trial = RunFolder(tmp_path).trial(f"trial_{i}")
        trial.write_params({"task": "solubility", "seed": seed, "probe": "linear", **params})
        trial.write_rows(
            [{"probe/solubility/mae": 9.0}, {"probe/solubility/mae": value, "probe/test/imputed": imputed}]
        )
    assert table.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "solubility (mae)" in out[0]
    assert out[2].startswith("Chemprop D-MPNN") and "end_to_end" in out[2] and "1.000 ± 0.000 (n=1)" in out[2]
    rows = {line.split("  ")[0]: line for line in out[3:]}
    assert "0.700 ± 0.100 (n=2, 3 imputed)" in rows["student <- descriptors"]  # students apart by teacher
    assert "0.500 ± 0.000 (n=1)" in rows["student <- boltz2:atom_attention"]
    # the published rows: offline solubility beside AqSolDB's figures, marked as other data
    best, chemprop_rdkit = (
        leaderboard.BOARD["solubility_aqsoldb"].best,
        leaderboard.BOARD["solubility_aqsoldb"].chemprop_rdkit,
    )
    assert (
        f"{best.mean:.3f} ± {best.std:.3f} ({best.method}; {best.where}) [solubility_aqsoldb: different data and split]"
        in rows["published: best of compilation"]
    )
    assert (
        f"{chemprop_rdkit.mean:.3f} ± {chemprop_rdkit.std:.3f} [solubility_aqsoldb: different data and split]"
        in rows["published: Chemprop-RDKit (TDC)"]
    )
    assert out[-1].startswith(f"published rows: {leaderboard.REPO}/{leaderboard.PATH} @ {leaderboard.COMMIT[:7]}")
    assert table.main([str(tmp_path / "none")]) == 2


def test_leaderboard_cells_name_their_source_or_absence():
    from trainers.boltz_distill import leaderboard, metric_name

    herg = leaderboard.BOARD["herg"]
    assert (
        leaderboard.cell("herg", "chemprop_rdkit") == f"{herg.chemprop_rdkit.mean:.3f} ± {herg.chemprop_rdkit.std:.3f}"
    )
    assert leaderboard.cell("herg", "best").endswith(f"({herg.best.method}; {herg.best.where})")
    assert leaderboard.cell("freesolv", "best") == "no TDC task"
    assert leaderboard.cell("bioavailability_ma", "chemprop_rdkit").startswith("not quoted: ")
    for task, published in leaderboard.BOARD.items():  # the quoted metric is the task's official one
        short = {"mae": "mae", "roc-auc": "auroc", "pr-auc": "auprc", "spearman": "spearman"}[published.metric]
        assert metric_name(task).endswith(short), task


def test_config_refuses_duplicate_trials_and_mismatched_probe():
    with pytest.raises(UserError, match="boltz2_layer"):
        from_dict(Config, {"teachers": ["conformer"], "boltz2_layer": "atom_attention"}, "t.yaml", "config")
    assert from_dict(Config, {"boltz2_layer": "atom_attention"}, "t.yaml").boltz2_layer == "atom_attention"
    with pytest.raises(UserError, match="probe"):
        from_dict(ProbeConfig, {"features": "chemprop", "probe": "mlp"}, "t.yaml", "config")
    with pytest.raises(UserError, match="probe"):
        from_dict(ProbeConfig, {"features": "morgan", "probe": "end_to_end"}, "t.yaml", "config")
    with pytest.raises(UserError, match="features=chemprop needs probe end_to_end"):
        from_dict(ProbeConfig, {"features": "chemprop", "probe": "gbm"}, "t.yaml", "config")
    with pytest.raises(UserError, match="linear, mlp or gbm"):
        from_dict(ProbeConfig, {"features": "morgan", "probe": "end_to_end"}, "t.yaml", "config")
    assert from_dict(ProbeConfig, {"features": "morgan_descriptors", "probe": "gbm"}, "t.yaml").probe == "gbm"


def test_corpus_leaves_out_every_test_molecule_and_reads_moses(tmp_path):
    from trainers.boltz_distill import corpus

    solubility = data.load_task("solubility")
    test_keys, sources = corpus.test_set_keys(allow_missing=True)
    assert sources == ["solubility", "freesolv"]
    assert {k for ks in map(corpus.leakage_keys, solubility.test_smiles) if ks for k in ks} <= test_keys
    smi = tmp_path / "c.smi"
    train_part = [s for s in solubility.train_val_smiles[:30] if not corpus.leakage_keys(s) & test_keys]
    smi.write_text("\n".join(solubility.test_smiles[:30] + train_part + train_part[:3]) + "\n")
    kept = corpus.corpus_smiles(str(smi), limit=0, allow_missing_tests=True)
    assert not {k for s in kept for k in corpus.leakage_keys(s)} & test_keys
    assert kept == list(dict.fromkeys(map(chem.canonical_smiles, train_part)))  # file order, duplicates once
    assert len(corpus.corpus_smiles(str(smi), limit=0, exclude_tests=False)) > len(kept)
    moses = corpus.corpus_smiles("moses", limit=200, allow_missing_tests=True)
    assert len(moses) == 200 and all(Chem.MolFromSmiles(k) is not None for k in moses)


# one test molecule per line, then its variants: stereo, salt, charge state, isotope, E/Z, tautomer
LEAKAGE_VARIANTS = {
    "CC(=O)CC(=O)C": ["CC(O)=CC(=O)C", "C/C(O)=C/C(C)=O"],  # keto-enol: InChI keeps them apart
    "CC(C)=O": ["CC(O)=C"],
    "CC(N)C(=O)O": [
        "C[C@H](N)C(=O)O",
        "C[C@@H](N)C(=O)O",
        "CC(N)C(=O)[O-].[Na+]",
        "CC([NH3+])C(=O)O.[Cl-]",
        "C[C@H]([NH3+])C(=O)[O-]",
        "[2H]C(C)(N)C(=O)O",
        "OC(=O)C(C)N.O",
    ],
    "CC=CC(=O)O": ["C/C=C/C(=O)O", "C/C=C\\C(=O)O", "C/C=C/C(=O)[O-].[K+]"],
    "c1ccc2[nH]ccc2c1": ["c1ccc2[nH]ccc2c1.Cl", "c1ccc2[nH]ccc2c1.OS(=O)(=O)O"],
}
DIFFERENT = ["CCC(N)C(=O)O", "NCCC(=O)O", "CC=CC(=O)OC", "c1ccc2occc2c1", "CC(N)C(=O)N"]


def test_leakage_key_groups_stereo_salt_charge_and_tautomer_variants_and_the_corpus_drops_them(tmp_path):
    from trainers.boltz_distill import ADMET_METRICS, corpus

    for parent, variants in LEAKAGE_VARIANTS.items():
        (key,) = corpus.leakage_keys(parent)
        assert len(key) == 14
        assert all(corpus.leakage_keys(v) == {key} for v in variants), parent
        # the old rule (canonical SMILES) let every variant through
        assert all(chem.canonical_smiles(v) != chem.canonical_smiles(parent) for v in variants)
    # control: without the canonical tautomer, InChI's key keeps keto and enol apart
    assert Chem.MolToInchiKey(Chem.MolFromSmiles("CC(O)=CC(=O)C")) != Chem.MolToInchiKey(
        Chem.MolFromSmiles("CC(=O)CC(=O)C")
    )
    # every organic fragment of a salt has its key: aspirin lysinate holds aspirin's and lysine's
    lysinate = corpus.leakage_keys("CC(=O)Oc1ccccc1C(=O)[O-].NCCCC[C@H]([NH3+])C(=O)O")
    assert lysinate == corpus.leakage_keys("CC(=O)Oc1ccccc1C(=O)O") | corpus.leakage_keys("NCCCCC(N)C(=O)O")
    assert len(lysinate) == 2
    parents = {k for p in LEAKAGE_VARIANTS for k in corpus.leakage_keys(p)}
    assert not {k for d in DIFFERENT for k in corpus.leakage_keys(d)} & parents  # near neighbours are kept
    assert corpus.leakage_keys("not a smiles") is None

    # an ADMET test set holding the parents: the corpus of variants and neighbours keeps only
    # the neighbours; with a set missing the run is refused unless the caller opts out
    root = tmp_path / "tdc"
    for i, task in enumerate(ADMET_METRICS):
        folder = root / "admet_group" / task
        folder.mkdir(parents=True)
        (folder / "train_val.csv").write_text("Drug_ID,Drug,Y\n0,CCO,1\n")
        tests = list(LEAKAGE_VARIANTS) if task == "herg" else ["CCO"]
        tests += ["CC(=O)Oc1ccccc1C(=O)[O-].NCCCC[C@H]([NH3+])C(=O)O"] if task == "ames" else []
        (folder / "test.csv").write_text("Drug_ID,Drug,Y\n" + "".join(f"{j},{s},1\n" for j, s in enumerate(tests)))
    smi = tmp_path / "c.smi"
    every_variant = [v for vs in LEAKAGE_VARIANTS.values() for v in vs]
    fragments = ["NCCCC[C@@H](N)C(=O)O", "CC(=O)Oc1ccccc1C(=O)O.[Na]"]  # the test salt's parts
    smi.write_text("\n".join(every_variant + fragments + DIFFERENT) + "\n")
    sets: list[str] = []
    kept = corpus.corpus_smiles(str(smi), tdc_data_dir=str(root), excluded_sets=sets)
    assert kept == [chem.canonical_smiles(d) for d in DIFFERENT]
    assert sets == ["solubility", "freesolv", *ADMET_METRICS]
    assert "22 of 22 TDC ADMET" in corpus.exclusion_line(sets)

    (root / "admet_group" / "herg" / "test.csv").unlink()
    with pytest.raises(UserError, match=r"1 of 22 TDC ADMET test sets .*herg.*allow_missing_tests"):
        corpus.corpus_smiles(str(smi), tdc_data_dir=str(root))
    sets = []
    assert len(
        corpus.corpus_smiles(str(smi), tdc_data_dir=str(root), allow_missing_tests=True, excluded_sets=sets)
    ) == len(every_variant) + len(DIFFERENT)  # ames' salt still leaves out its fragments
    assert "herg" not in sets and "(missing: herg)" in corpus.exclusion_line(sets)


def test_scaffold_disjoint_arm_leaves_out_every_test_scaffold():
    from trainers.boltz_distill import corpus

    scaffolds: set[str] = set()
    corpus.test_set_keys(allow_missing=True, scaffolds=scaffolds)
    ring_tests = [s for s in data.load_task("solubility").test_smiles if corpus.test_scaffold(s)]
    assert {corpus.test_scaffold(s) for s in ring_tests} <= scaffolds

    def shared(kept):  # the solubility ring test molecules whose scaffold the corpus holds
        held = {corpus.test_scaffold(k) for k in kept}
        return sum(corpus.test_scaffold(s) in held for s in ring_tests) / len(ring_tests)

    plain = corpus.corpus_smiles("nci", limit=500, allow_missing_tests=True)
    disjoint = corpus.corpus_smiles("nci", limit=500, allow_missing_tests=True, exclude_test_scaffolds=True)
    print(
        f"solubility ring test molecules sharing a scaffold with 500 NCI: {shared(plain):.2f} -> {shared(disjoint):.2f}"
    )
    assert shared(plain) > 0.2  # control: the plain corpus holds test scaffolds (0.58 measured)
    assert shared(disjoint) == 0 and len(disjoint) == 500
    assert not {corpus.test_scaffold(k) for k in disjoint} & scaffolds


def test_missing_admet_test_sets_refuse_the_run_before_ray(tmp_path, capsys):
    from raylab.experiment import load as load_experiment
    from raylab.launch.checks import preflight as workload_preflight
    from trainers.boltz_distill import corpus

    out = tmp_path / "c.smi"
    assert corpus.main(["nci", "--limit", "5", "--out", str(out), "--tdc-data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "22 of 22 TDC ADMET test sets" in err[0] and "allow_missing_tests" in err[0]
    assert not out.exists()
    assert (
        corpus.main(
            ["nci", "--limit", "5", "--out", str(out), "--tdc-data-dir", str(tmp_path), "--allow-missing-tests"]
        )
        == 0
    )
    assert len(out.read_text().split()) == 5 and "missing: caco2_wang" in capsys.readouterr().out
    # the experiment's own YAML: the paper-scale config is refused here, its smoke config runs
    overrides = [
        f"config.tdc_data_dir={tmp_path}",
        "config.store_root=" + str(tmp_path / "s"),
        "search.variant=[{teachers: [descriptors]}]",
    ]
    with pytest.raises(UserError, match="tdc_data_dir: 22 of 22"):
        workload_preflight(load_experiment("boltz_distill", overrides))
    workload_preflight(load_experiment("boltz_distill", overrides, smoke=True))


@pytest.mark.slow
def test_probe_reads_every_student_of_a_finished_distill_run(tmp_path, local_trial, capsys, one_thread):
    from raylab import checkpoint as ckpt
    from trainers.boltz_distill import students, table
    from trainers.boltz_distill.loop import distill

    # a finished boltz_distill run of two trials (two seeds), each with its checkpoint folder
    run = tmp_path / "boltz_distill-run"
    for seed in (0, 1):
        cfg = Config(
            corpus="nci",
            max_molecules=40,
            epochs=1,
            teachers=("descriptors",),
            width=16,
            depth=2,
            batch_size=16,
            seed=seed,
            store_root=str(tmp_path / "stores"),
            allow_missing_tests=True,
        )
        trial = RunFolder(run).trial(f"trial_{seed}")
        ckpt.save(trial.checkpoint_path(0), distill(cfg))
        trial.write_rows([{"distill/val_loss": 1.0, "done": True}])
    (run / "not_a_trial").mkdir()
    assert students.run_students(str(run)) == ["trial_0", "trial_1"]
    assert students.main([str(run)]) == 0
    printed = capsys.readouterr().out
    assert "trial_1: teachers descriptors" in printed and 'search.student_trial=["trial_0", "trial_1"]' in printed

    probes = tmp_path / "admet_probe-run"
    rows = {}
    for name in ("trial_0", "trial_1"):
        rows[name] = local_trial(
            "admet_probe",
            "search.variant=[{features: student, probe: linear}]",
            f"config.students_from={run}",
            f"config.student_trial={name}",
            trial_dir=probes / f"probe_{name}",
        )[-1]
        assert np.isfinite(rows[name][data.metric_name("solubility")])
    assert rows["trial_0"][data.metric_name("solubility")] != rows["trial_1"][data.metric_name("solubility")]
    cells = table.collect(probes)
    names = sorted(name for name, _ in cells)
    assert names == [f"student <- descriptors [run: width 16, depth 2, lr 0.001, seed {s}]" for s in (0, 1)]
    # a trial name not in the run is refused before Ray starts, naming the trials there
    from trainers.boltz_distill.probe_loop import preflight

    with pytest.raises(UserError, match=r"student_trial: 'trial_7' .* trial_0, trial_1"):
        preflight(ProbeConfig(features="student", students_from=str(run), student_trial="trial_7"))
