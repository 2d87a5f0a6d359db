"""fair_adv through real Ray Tune on synthetic CIFAR-format data: metrics, resume, preflight."""

import math

import pytest
from conftest import assert_finite_metrics

from raylab import experiment as experiments
from raylab.config import from_dict
from raylab.errors import UserError
from trainers.fair_adv import METRICS
from trainers.fair_adv import loop as fair_loop
from trainers.fair_adv.config import Config

AUTOATTACK = fair_loop.autoattack_available()
EXPECTED = [m for m in METRICS if AUTOATTACK or not m.startswith("final/autoattack")]
NOT_EXACT = {"train/images_per_s"}  # wall-clock



def test_yaml_files_load_and_name_a_reported_metric():
    for name in ("fair_adv", "fair_adv_tri"):
        for smoke in (False, True):
            experiment = experiments.load(name, smoke=smoke)
            assert experiment.metric in METRICS
            experiment.resolved_config()
    full = experiments.load("fair_adv")
    assert full.resources.gpus_per_worker == 1
    assert full.resolved_config()["epochs"] == 110
    assert set(full.search["method"]["grid"]) == {"standard", "pgd_at", "trades", "frl", "tri_regime"}


@pytest.mark.slow
def test_smoke_sweep_reports_every_metric(smoke_sweep, tmp_path):
    results, _, _ = smoke_sweep("fair_adv", f"config.data_dir={tmp_path / 'data'}")
    assert len(results) == 2
    for result in results:
        assert result.error is None
        row = result.metrics
        assert_finite_metrics(row, EXPECTED)
        assert row["train/epoch"] == 3
        assert len(row["eval/robust_acc_per_class"]) == 10
        fractions = [row[f"regime/{r}_frac"] for r in ("outlier", "boundary", "safe")]
        assert math.isclose(sum(fractions), 1.0)
        assert row["eval/robust_acc_worst_class"] <= row["eval/robust_acc"] <= row["eval/clean_acc"] + 1e-9
        assert result.checkpoint is not None


@pytest.mark.slow
def test_stopped_trial_resumes_exactly(local_trial, tmp_path):
    overrides = (f"config.data_dir={tmp_path / 'data'}", "config.method=tri_regime",
                 "config.autoattack='off'", "config.epochs=2", "config.lr_milestones=[1]")
    full = local_trial("fair_adv", *overrides, trial_dir=tmp_path / "full")
    part = local_trial("fair_adv", *overrides, trial_dir=tmp_path / "resumed", stop={"train/epoch": 1})
    assert [row["train/epoch"] for row in part] == [1]
    rest = local_trial("fair_adv", *overrides, trial_dir=tmp_path / "resumed")
    assert [row["train/epoch"] for row in rest] == [2]
    for name in METRICS:
        if name in full[-1] and name not in NOT_EXACT:
            assert rest[-1][name] == full[-1][name], name
    assert "final/cw_acc" in rest[-1] and "final/autoattack_acc" not in rest[-1]


def test_preflight_names_what_is_wrong(tmp_path, monkeypatch):
    with pytest.raises(UserError, match=str(tmp_path / "none")):
        fair_loop.preflight(from_dict(Config, {"data_dir": str(tmp_path / "none")}, "test"))
    with pytest.raises(UserError, match="val_size"):
        fair_loop.preflight(Config(synthetic_data=True, synthetic_train=100, val_size=100))
    monkeypatch.setattr(fair_loop, "autoattack_available", lambda: False)
    with pytest.raises(UserError, match="pyautoattack"):
        fair_loop.preflight(Config(synthetic_data=True, val_size=50, autoattack="on"))
    fair_loop.preflight(Config(synthetic_data=True, val_size=50, autoattack="auto"))
