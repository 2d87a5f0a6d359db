"""features: chemprop_rdkit: Chemprop's D-MPNN with the 200 normalized RDKit 2D descriptors, and
the published rows on every task the ADMET table reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rdkit import Chem
from threadpoolctl import threadpool_limits

from raylab.config import from_dict
from raylab.errors import UserError
from trainers.boltz_distill.config import ProbeConfig

pytestmark = pytest.mark.usefixtures("one_thread")

SMILES = ["CCO", "c1ccccc1", "CC(=O)Oc1ccccc1C(=O)O", "CCCCCCCCCCCCCCCC(=O)O", "CN1CCC[C@H]1c1cccnc1"]


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with threadpool_limits(1):
        yield


def test_rdkit2d_normalized_is_descriptastorus_cdf_of_each_descriptor():
    from descriptastorus.descriptors import rdNormalizedDescriptors

    from trainers.boltz_distill.supervised import rdkit2d_normalized

    mols = [Chem.MolFromSmiles(s) for s in SMILES]
    x = rdkit2d_normalized(mols)
    columns = [name for name, _ in rdNormalizedDescriptors.RDKit2DNormalized().columns]
    assert x.shape == (5, 200) == (len(mols), len(columns)) and x.dtype == np.float32
    assert np.isfinite(x).all() and x.min() >= 0.0 and x.max() <= 1.0  # CDF values
    # a CDF is monotone in its descriptor: heavier / more lipophilic molecules rank higher
    weight, logp = x[:, columns.index("MolWt")], x[:, columns.index("MolLogP")]
    assert weight[0] < weight[1] < weight[2]  # ethanol 46 < benzene 78 < aspirin 180 g/mol
    assert logp[0] < logp[1] < logp[3]  # ethanol < benzene < palmitic acid
    # the same as Chemprop's own v1_rdkit_2d_normalized featurizer on each molecule
    from chemprop.featurizers import MoleculeFeaturizerRegistry

    chemprop_featurizer = MoleculeFeaturizerRegistry["v1_rdkit_2d_normalized"]()
    np.testing.assert_allclose(x[2], np.asarray(chemprop_featurizer(mols[2]), dtype=np.float32))


def test_extra_features_widen_the_ffn_and_reach_the_prediction():
    from chemprop.data import BatchMolGraph
    from chemprop.featurizers import SimpleMoleculeMolGraphFeaturizer
    from sklearn.preprocessing import StandardScaler

    from trainers.boltz_distill.supervised import EndToEnd, chemprop_mpnn

    torch.manual_seed(0)
    featurizer = SimpleMoleculeMolGraphFeaturizer()
    bmg = BatchMolGraph([featurizer(Chem.MolFromSmiles(s)) for s in SMILES])
    scaler = StandardScaler().fit(np.array([[0.0], [2.0]]))
    plain, with_rdkit = chemprop_mpnn(0, EndToEnd(), scaler), chemprop_mpnn(200, EndToEnd(), scaler)
    assert plain.predictor.ffn[0][0].in_features == 300
    assert with_rdkit.predictor.ffn[0][0].in_features == 500
    plain.eval(), with_rdkit.eval()
    x_d = torch.rand(len(SMILES), 200, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert plain(bmg, None, None).shape == (5, 1)
        out = with_rdkit(bmg, None, x_d)
        moved = with_rdkit(bmg, None, x_d.flip(0))  # each molecule given another's descriptors
    assert out.shape == (5, 1) and not torch.allclose(out, moved)


def test_end_to_end_hands_chemprop_each_molecules_own_descriptors(monkeypatch, tmp_path):
    from trainers.boltz_distill import data as tasks
    from trainers.boltz_distill import probe_loop, supervised

    mols = [Chem.MolFromSmiles(s) for s in SMILES * 2]
    keys = [f"{Chem.MolToSmiles(m)}" for m in mols]
    task = tasks.Task(
        name="solubility",
        metric="mae",
        train_val_smiles=keys[:6],
        train_val_y=np.arange(6.0),
        test_smiles=keys[6:],
        test_y=np.arange(4.0),
    )
    split = probe_loop.Split(
        task, [0, 1, 2, 3], [4, 5], keys[:6], mols[:6], np.arange(6.0), keys[6:], mols[6:], np.ones(4, dtype=bool)
    )
    seen = {}

    def fake_train_chemprop(train_smiles, train_y, valid_smiles, valid_y, test_smiles, classify, settings, x_d):
        seen.update(train=train_smiles, valid=valid_smiles, test=test_smiles, x_d=x_d)
        return np.zeros(len(test_smiles))

    monkeypatch.setattr(supervised, "train_chemprop", fake_train_chemprop)
    cfg = ProbeConfig(task="solubility", features="chemprop_rdkit", probe="end_to_end", store_root=str(tmp_path))
    probe_loop.end_to_end(cfg, split)
    own = {k: supervised.rdkit2d_normalized([Chem.MolFromSmiles(k)])[0] for k in keys}
    for part, rows in zip(("train", "valid", "test"), seen["x_d"]):
        assert rows.shape == (len(seen[part]), 200)
        for smiles, row in zip(seen[part], rows):
            np.testing.assert_array_equal(row, own[smiles])
    # the seeds of a task read the cache: no descriptor is computed again
    monkeypatch.setattr(supervised, "rdkit2d_normalized", lambda mols: pytest.fail("recomputed"))
    first = seen["x_d"]
    probe_loop.end_to_end(cfg, split)
    for a, b in zip(first, seen["x_d"]):
        np.testing.assert_array_equal(a, b)
    cfg = ProbeConfig(task="solubility", features="chemprop", probe="end_to_end", store_root=str(tmp_path))
    probe_loop.end_to_end(cfg, split)
    assert seen["x_d"] is None  # plain Chemprop gets no extra features


def test_chemprop_rdkit_is_an_end_to_end_model():
    assert from_dict(ProbeConfig, {"features": "chemprop_rdkit", "probe": "end_to_end"}, "t.yaml").features == (
        "chemprop_rdkit"
    )
    with pytest.raises(UserError, match="features=chemprop_rdkit needs probe end_to_end"):
        from_dict(ProbeConfig, {"features": "chemprop_rdkit", "probe": "mlp"}, "t.yaml", "config")


def test_table_has_both_published_rows_on_every_task_it_reports():
    from trainers.boltz_distill import ADMET_METRICS, TASK_METRICS, leaderboard, metric_name, table

    cells = {("Morgan + descriptors", "gbm"): {task: [(0.5, 0)] for task in TASK_METRICS}}
    lines = table.format_table(cells).splitlines()
    for name, _ in leaderboard.ROWS:
        row = next(line for line in lines if line.startswith(name))
        assert "no figure read" not in row
    assert set(leaderboard.BOARD) == set(ADMET_METRICS)  # every TDC task of the table
    for task in ADMET_METRICS:
        published = leaderboard.BOARD[task]
        short = metric_name(task).rsplit("/", 1)[1]
        assert {"mae": "mae", "roc-auc": "auroc", "pr-auc": "auprc", "spearman": "spearman"}[published.metric] == short
        assert leaderboard.cell(task, "best").startswith(f"{published.best.mean:.3f} ± ")
        if published.chemprop_rdkit is None:  # a gap names its reason
            assert published.missing and leaderboard.cell(task, "chemprop_rdkit") == f"not quoted: {published.missing}"
            continue
        assert published.chemprop_rdkit.method == "Chemprop-RDKit"
        # the compilation holds Chemprop-RDKit, so its best is at least as good
        best, cr = published.best.mean, published.chemprop_rdkit.mean
        assert best <= cr if published.metric == "mae" else best >= cr, task
    assert set(leaderboard.CROSS_CHECKED) <= set(leaderboard.BOARD)
    assert "different data and split" in leaderboard.cell("solubility", "best")
    assert leaderboard.cell("freesolv", "chemprop_rdkit") == "no TDC task"


@pytest.mark.parametrize("smoke", [False, True])
def test_sweep_runs_chemprop_rdkit_and_gbm_beside_plain_chemprop_on_every_task(smoke):
    from raylab import experiment as experiments
    from trainers.boltz_distill import ADMET_METRICS

    search = experiments.load("admet_probe", [], smoke=smoke).search
    variants = [(v.get("features"), v.get("probe")) for v in search["variant"]["grid"]]
    assert {("chemprop", "end_to_end"), ("chemprop_rdkit", "end_to_end"), ("morgan_descriptors", "gbm")} <= set(
        variants
    )
    assert variants.index(("chemprop_rdkit", "end_to_end")) == variants.index(("chemprop", "end_to_end")) + 1
    assert list(search["task"]["grid"]) == (["solubility"] if smoke else list(ADMET_METRICS))
