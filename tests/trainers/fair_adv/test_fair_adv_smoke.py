"""fair_adv through real Ray Tune on synthetic CIFAR-format data: metrics, resume, preflight."""

import math
import sys

import pytest
from conftest import assert_finite_metrics

from raylab import experiment as experiments
from raylab.config import from_dict, with_variant
from raylab.errors import UserError
from trainers.fair_adv import METRICS
from trainers.fair_adv import loop as fair_loop
from trainers.fair_adv.config import Config

NOT_EXACT = {"train/images_per_s"}  # wall-clock
ARMS = [
    {"method": "standard"},
    {"method": "pgd_at"},
    {"method": "trades"},
    {"method": "tri_regime", "base_loss": "pgd_at"},
    {"method": "tri_regime", "base_loss": "trades"},
    {"method": "frl", "base_loss": "pgd_at"},
    {"method": "frl", "base_loss": "trades"},
]


def test_yaml_files_load_and_name_a_reported_metric():
    for name in ("fair_adv", "fair_adv_tri", "fair_adv_long", "fair_adv_digits"):
        for smoke in (False, True):
            experiment = experiments.load(name, smoke=smoke)
            assert experiment.metric in METRICS
            assert experiment.metric.startswith(("val/", "best/val_"))  # ranked on validation
            config = experiment.resolved_config()
            assert config["val_size"] >= (100 if name == "fair_adv_digits" else 300) * 10 or smoke
            assert config["autoattack"] == ("off" if name == "fair_adv_tri" else "on")
    full = experiments.load("fair_adv")
    assert full.resources.gpus_per_worker == 0.5  # packed: two ResNet-18 trials per GPU
    config = full.resolved_config()
    assert (config["epochs"], config["lr_milestones"], config["frl_finetune_epochs"]) == (150, [100, 105], 40)
    variants = full.search["variant"]["grid"]
    assert all(arm in variants for arm in ARMS)  # each method on each base loss, equal epochs
    assert {
        "method": "frl",
        "base_loss": "trades",
        "frl_remargin": True,
        "frl_tau_nat": 0.07,
        "frl_tau_bndy": 0.07,
    } in variants
    long = experiments.load("fair_adv_long").resolved_config()
    assert (long["epochs"], long["lr_milestones"]) == (200, [100, 150])  # Rice et al.
    digits = experiments.load("fair_adv_digits")
    config = digits.resolved_config()
    assert (config["dataset"], config["eps"], config["train_steps"], config["eval_steps"]) == (
        "mnist5k",
        0.3,
        40,
        100,
    )  # Madry et al.'s MNIST protocol
    variants = digits.search["variant"]["grid"]
    assert all(arm in variants for arm in ARMS if arm.get("base_loss") != "trades" or arm["method"] == "frl")
    assert {"method": "frl", "base_loss": "trades", "frl_rate_nat": 0.0, "frl_rate_bndy": 0.0} in variants


def test_digits_config_errors_name_the_key(tmp_path):
    with pytest.raises(UserError, match="augment"):
        from_dict(Config, {"dataset": "mnist5k", "model": "small_cnn"}, "test.yaml")
    with pytest.raises(UserError, match="model"):
        from_dict(Config, {"dataset": "digits8x8", "augment": False}, "test.yaml")
    cfg = from_dict(
        Config,
        {"dataset": "digits8x8", "augment": False, "model": "small_cnn", "val_size": 2000, "autoattack": "off"},
        "test.yaml",
    )
    with pytest.raises(UserError, match="val_size: 2000 leaves no training images out of 1438"):
        fair_loop.preflight(cfg)


@pytest.mark.slow
def test_smoke_sweep_reports_every_metric(shared_smoke_sweep):
    # the report tests read the same sweep
    results, _, _ = shared_smoke_sweep("fair_adv", "config.data_dir={shared}/fair_adv-data")
    assert len(results) == 2
    for result in results:
        assert result.error is None
        row = result.metrics
        assert_finite_metrics(row, METRICS)  # AutoAttack included: it is on, never skipped
        assert row["train/epoch"] == 3
        assert len(row["eval/robust_acc_per_class"]) == 10
        assert len(row["regime/outlier_frac_per_class"]) == 10
        if with_variant(result.config)["method"] == "frl":  # its own model: a fine-tuning epoch (2 or 3)
            assert 2 <= row["best/epoch"] <= 3 and row["train/lr"] == 1e-3
        fractions = [row[f"regime/{r}_frac"] for r in ("outlier", "boundary", "safe")]
        assert math.isclose(sum(fractions), 1.0)
        assert row["eval/robust_acc_worst_class"] <= row["eval/robust_acc"] <= row["eval/clean_acc"] + 1e-9
        assert result.checkpoint is not None


@pytest.mark.slow
def test_stopped_trial_resumes_exactly(local_trial, tmp_path):
    # FRL: stopped after its first fine-tuning epoch, so the multipliers are in the checkpoint
    overrides = (
        f"config.data_dir={tmp_path / 'data'}",
        "config.method=frl",
        "config.autoattack='off'",
        "config.epochs=3",
        "config.lr_milestones=[1]",
        "config.frl_finetune_epochs=2",
    )
    full = local_trial("fair_adv", *overrides, trial_dir=tmp_path / "full")
    part = local_trial("fair_adv", *overrides, trial_dir=tmp_path / "resumed", stop={"train/epoch": 2})
    assert [row["train/epoch"] for row in part] == [1, 2]
    rest = local_trial("fair_adv", *overrides, trial_dir=tmp_path / "resumed")
    assert [row["train/epoch"] for row in rest] == [3]
    assert rest[-1]["train/lr"] == 1e-3 and full[0]["train/lr"] == 0.1  # two stages
    assert full[-1]["frl/clean_weight_per_class"] != [0.1] * 10  # the multipliers moved
    for name in METRICS:
        if name in full[-1] and name not in NOT_EXACT:
            assert rest[-1][name] == full[-1][name], name
    assert "final/cw_acc" in rest[-1] and "final/autoattack_acc" not in rest[-1]


def test_preflight_names_what_is_wrong(tmp_path, monkeypatch):
    with pytest.raises(UserError, match=str(tmp_path / "none")):
        fair_loop.preflight(from_dict(Config, {"data_dir": str(tmp_path / "none")}, "test"))
    with pytest.raises(UserError, match="val_size"):
        fair_loop.preflight(Config(synthetic_data=True, synthetic_train=100, val_size=100))
    with pytest.raises(UserError, match="val_size: 5 is fewer than one image per class"):
        fair_loop.preflight(Config(synthetic_data=True, val_size=5))
    monkeypatch.setitem(sys.modules, "pyautoattack", None)  # import pyautoattack now fails
    with pytest.raises(UserError, match=r"fair_adv needs pyautoattack for autoattack: 'on'.*raylab\[fair_adv\]"):
        fair_loop.preflight(Config(synthetic_data=True, val_size=50, autoattack="on"))
    fair_loop.preflight(Config(synthetic_data=True, val_size=50, autoattack="off"))


def test_missing_autoattack_is_a_one_line_error_before_ray(tmp_path):
    """With pyautoattack unimportable, the full experiment stops in preflight: exit 2, one line."""
    import os
    import subprocess
    import sys

    fake = tmp_path / "hide" / "pyautoattack"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "hide"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "raylab.tune", "fair_adv", "--smoke", f"config.data_dir={tmp_path / 'data'}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "fair_adv needs pyautoattack" in lines[0], done.stderr
