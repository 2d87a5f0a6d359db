"""The backdoor workload through Ray Tune on synthetic CIFAR-format data; configs; resume."""

import pytest
from conftest import assert_finite_metrics

from raylab import experiment as experiments
from raylab import checks
from raylab.errors import UserError
from trainers.backdoor import METRICS, THEORY_METRICS
from trainers.backdoor.config import Config, TheoryConfig
from trainers.backdoor.loop import preflight


@pytest.mark.parametrize("name", ["backdoor", "backdoor_resnet", "backdoor_theory"])
def test_experiments_load_with_and_without_smoke(name):
    for smoke in (False, True):
        experiment = experiments.load(name, smoke=smoke)
        assert experiment.metric in (METRICS if experiment.workload == "backdoor" else THEORY_METRICS)
    full = experiments.load("backdoor_resnet")
    assert full.search["poison_ratio"] == {"grid": [0.005, 0.01, 0.05, 0.1]}
    assert full.search["attack"] == {"grid": ["badnets", "blended", "wanet"]}


def test_config_errors_name_the_key():
    with pytest.raises(UserError, match="attack: unknown attack 'trojan'"):
        experiments.load("backdoor", ["config.attack=trojan"])
    with pytest.raises(UserError, match="target_class: 10 is not a class of cifar10"):
        experiments.load("backdoor", ["config.target_class=10"])
    with pytest.raises(UserError, match="early_steps: must be <= steps"):
        experiments.load("backdoor_theory", ["config.early_steps=500"])
    assert Config().epochs == 100 and Config().lr == 0.01 and Config().batch_size == 128
    assert TheoryConfig().early_steps <= TheoryConfig().steps


def test_preflight_names_the_missing_dataset_before_ray_starts(tmp_path):
    experiment = experiments.load("backdoor", [f"config.data_dir={tmp_path}/nothing", "config.download=false"])
    with pytest.raises(UserError, match=r"cifar10 not found: looked for .*nothing/cifar-10-batches-py"):
        checks.preflight(experiment)
    preflight(Config(synthetic_data=True, data_dir=str(tmp_path / "nothing")))  # writes its own
    with pytest.raises(UserError, match="blend_image: no such file"):
        preflight(Config(attack="blended", blend_image=str(tmp_path / "k.png"), synthetic_data=True))


@pytest.mark.slow
def test_backdoor_smoke_sweep_reports_every_metric(smoke_sweep, tmp_path):
    results, _, _ = smoke_sweep("backdoor_resnet", f"config.data_dir={tmp_path}/data")
    assert len(results) == 2  # badnets and wanet
    for result in results:
        assert result.error is None, result.error
        assert_finite_metrics(result.metrics, METRICS)
        assert result.metrics["finetune/epoch"] == 1  # the fine-tuning phase ran
        assert result.metrics["train/epoch"] == 2
        assert 0 <= result.metrics["eval/asr"] <= 1 and result.checkpoint is not None


@pytest.mark.slow
def test_backdoor_trial_resumes_mid_epoch_and_matches(local_trial, tmp_path, one_thread):
    overrides = (f"config.data_dir={tmp_path}/data", "config.model_width=8")
    full = local_trial("backdoor", *overrides)
    part = local_trial("backdoor", *overrides, trial_dir=tmp_path / "resumed", stop={"train/step": 1})
    assert part[-1]["train/step"] == 1 and "train/acc" not in part[-1]  # stopped inside epoch 1
    rest = local_trial("backdoor", *overrides, trial_dir=tmp_path / "resumed")
    assert rest[0]["train/step"] == 2 and rest[0]["train/epoch"] == 1
    skip = {"perf/images_per_s", "time_total_s", "training_iteration"}
    assert {k: v for k, v in rest[-1].items() if k not in skip} == \
        {k: v for k, v in full[-1].items() if k not in skip}


def test_theory_smoke_sweep_reports_every_metric(smoke_sweep):
    results, _, _ = smoke_sweep("backdoor_theory")
    assert len(results) == 2
    ratios = {}
    for result in results:
        assert result.error is None, result.error
        assert_finite_metrics(result.metrics, THEORY_METRICS)
        assert result.metrics["theory/step"] == 60
        ratios[result.config["poison_ratio"]] = result.metrics["theory/loss_drop_ratio"]
    assert ratios[0.1] > ratios[0.01] > 1
