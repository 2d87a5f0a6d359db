"""The backdoor workload through Ray Tune on synthetic CIFAR-format data; configs; resume."""

import dataclasses
import math

import pytest
from conftest import assert_finite_metrics

from raylab import experiment as experiments
from raylab.errors import UserError
from raylab.launch import checks
from trainers.backdoor import METRICS, THEORY_METRICS
from trainers.backdoor.config import Config, TheoryConfig
from trainers.backdoor.loop import preflight


@pytest.mark.parametrize(
    "name", ["backdoor", "backdoor_resnet", "backdoor_digits", "backdoor_cifar_control", "backdoor_theory"]
)
def test_experiments_load_with_and_without_smoke(name):
    for smoke in (False, True):
        experiment = experiments.load(name, smoke=smoke)
        assert experiment.metric in (METRICS if experiment.workload == "backdoor" else THEORY_METRICS)


@pytest.mark.parametrize(
    "name", ["backdoor", "backdoor_resnet", "backdoor_digits", "backdoor_cifar_control", "backdoor_theory"]
)
def test_each_distinct_training_is_swept_once(name):
    """No two trials of a grid train the same model: badnets and blended differ only in the
    trigger, so at poison_ratio 0 (nothing triggered) they would train the same network twice."""
    import itertools

    from raylab import search_space
    from raylab.config import with_variant

    experiment = experiments.load(name)
    keys = list(experiment.search)
    assert all(list(spec) == ["grid"] for spec in experiment.search.values())  # grids only
    trials = [
        with_variant({**experiment.config, **dict(zip(keys, values))})
        for values in itertools.product(*(experiment.search[k]["grid"] for k in keys))
    ]
    assert len(trials) == search_space.grid_size(experiment.search)

    def training(config):  # what the trained network depends on: the trigger only when p > 0
        config = dict(config)
        if config.get("poison_ratio") == 0 and config.get("attack") in ("badnets", "blended"):
            config["attack"] = "badnets or blended, untriggered"
        return repr(sorted(config.items()))

    assert len({training(c) for c in trials}) == len(trials)
    if name == "backdoor_resnet":  # 12 poisoned arms and two clean ones, x 3 seeds
        arms = {(c["attack"], c["poison_ratio"]) for c in trials}
        assert len(trials) == 42 and len(arms) == 14
        assert sorted(a for a, p in arms if p == 0) == ["badnets", "wanet"]


def test_config_errors_name_the_key():
    with pytest.raises(UserError, match="attack: unknown attack 'trojan'"):
        experiments.load("backdoor", ["config.attack=trojan"])
    with pytest.raises(UserError, match="target_class: 10 is not a class of cifar10"):
        experiments.load("backdoor", ["config.target_class=10"])
    with pytest.raises(UserError, match="lr_schedule: 'step' is not one of 'per_attack', 'cosine', 'constant'"):
        experiments.load("backdoor", ["config.lr_schedule=step"])
    with pytest.raises(UserError, match="early_steps: must be <= steps"):
        experiments.load("backdoor_theory", ["config.early_steps=500"])
    assert Config().epochs == 100 and Config().lr == 0.01 and Config().batch_size == 128
    ft = Config()  # BackdoorBench FT (config/defense/ft/config.yaml)
    assert (ft.finetune_epochs, ft.finetune_batch_size, ft.finetune_lr, ft.finetune_t_max, ft.finetune_fraction) == (
        100,
        256,
        0.01,
        100,
        0.05,
    )
    for name in ("backdoor", "backdoor_resnet"):
        config = experiments.load(name).config
        assert config.get("finetune_epochs", 100) == 100 and config.get("finetune_batch_size", 256) == 256
    assert TheoryConfig().early_steps <= TheoryConfig().steps


def test_preflight_names_the_missing_dataset_before_ray_starts(tmp_path):
    experiment = experiments.load("backdoor", [f"config.data_dir={tmp_path}/nothing", "config.download=false"])
    with pytest.raises(UserError, match=r"cifar10 not found: looked for .*nothing/cifar-10-batches-py"):
        checks.preflight(experiment)
    preflight(Config(synthetic_data=True, data_dir=str(tmp_path / "nothing")))  # writes its own
    with pytest.raises(UserError, match="blend_image: no such file"):
        preflight(Config(attack="blended", blend_image=str(tmp_path / "k.png"), synthetic_data=True))
    with pytest.raises(UserError, match="blend_image: skimage.data has no image 'kitty'"):
        preflight(
            Config(
                attack="blended", blend_image="skimage:kitty", synthetic_data=True, data_dir=str(tmp_path / "nothing")
            )
        )


@pytest.mark.slow
@pytest.mark.long  # about 110 s (two ResNet arms); backdoor's own smoke sweep stays in the default run
def test_backdoor_smoke_sweep_reports_every_metric(smoke_sweep, tmp_path):
    # synthetic images for 2 steps stay at chance: every ASR is reported (floor 0) to check it is finite
    results, _, _ = smoke_sweep(
        "backdoor_resnet", f"config.data_dir={tmp_path}/data", "config.clean_acc_floor_x_chance=0"
    )
    assert len(results) == 2  # badnets and wanet
    for result in results:
        assert result.error is None, result.error
        assert_finite_metrics(result.metrics, METRICS)
        assert result.metrics["finetune/epoch"] == 1  # the fine-tuning phase ran
        assert result.metrics["train/epoch"] == 2
        assert 0 <= result.metrics["eval/asr"] <= 1 and result.checkpoint is not None


def test_clean_baseline_arm_runs_finite_and_finetunes_on_backdoorbench_schedule(local_trial, tmp_path, one_thread):
    rows = local_trial(
        "backdoor",
        f"config.data_dir={tmp_path}/data",
        "config.model_width=8",
        "config.poison_ratio=0.0",
        "config.clean_acc_floor_x_chance=0",  # at chance here: report every ASR, to check it is finite
        "config.finetune_epochs=3",
        "config.finetune_batch_size=16",
        "config.finetune_t_max=4",
    )
    last = rows[-1]
    assert_finite_metrics(last, METRICS)  # no empty group, no NaN, at poison_ratio 0
    assert last["neurons/trigger_dominant_count"] >= 0
    # 5% -> here 25% of 128 = 32 clean images, batch 16: 2 steps per epoch, 3 epochs.
    assert [r["finetune/step"] for r in rows if "finetune/step" in r][-3:] == [2, 4, 6]
    assert last["finetune/lr"] == pytest.approx(0.01 * (1 + math.cos(math.pi * 3 / 4)) / 2)


def test_wanet_trains_on_clean_images_warped_per_global_batch(tmp_path):
    import torch

    from raylab.data.cifar import load_cifar
    from trainers.backdoor import wanet
    from trainers.backdoor.loop import build_data, crop_flip_batch, trigger_spec, wanet_batch

    cfg = Config(
        attack="wanet",
        synthetic_data=True,
        data_dir=str(tmp_path / "d"),
        synthetic_train_size=128,
        synthetic_test_size=32,
        probe_size=8,
        coherence_size=4,
        finetune_fraction=0.25,
    )
    data = build_data(cfg, torch.device("cpu"))
    assert torch.equal(data.train_x, load_cifar("cifar10", tmp_path / "d").train_x)  # nothing fixed
    spec, idx = trigger_spec(cfg), torch.arange(20, 84)
    x, y = wanet_batch(data, idx, dataclasses.replace(cfg, augment=False), spec, (0, 3), 0, 1)
    expected, labels, n_bd, _ = wanet.poison_batch(
        data.train_x[idx], data.train_y[idx], spec, 0.1, 2.0, 0, torch.Generator().manual_seed(0)
    )
    assert n_bd == 6 and (y[:6] == 0).all() and torch.allclose(x[:6], expected[:6])
    later, _ = wanet_batch(data, idx, cfg, spec, (0, 4), 0, 1)
    assert not torch.allclose(later, wanet_batch(data, idx, cfg, spec, (0, 3), 0, 1)[0])  # per batch
    # Every random draw is made for the global batch: two workers see its two halves.
    for batch_of in (
        lambda r, w: wanet_batch(data, idx, cfg, spec, (1, 2), r, w),
        lambda r, w: crop_flip_batch(data, idx, cfg, ("aug", 1, 2), r, w),
    ):
        whole, halves = batch_of(0, 1), [batch_of(r, 2) for r in (0, 1)]
        assert torch.equal(whole[0][0::2], halves[0][0]) and torch.equal(whole[0][1::2], halves[1][0])
        assert torch.equal(whole[1][1::2], halves[1][1])


@pytest.mark.slow
def test_backdoor_trial_resumes_mid_epoch_and_matches(local_trial, tmp_path, one_thread):
    # at chance (4 steps on synthetic images): ASR reported (floor 0), so the rows compare as numbers
    overrides = (f"config.data_dir={tmp_path}/data", "config.model_width=8", "config.clean_acc_floor_x_chance=0")
    full = local_trial("backdoor", *overrides)
    part = local_trial("backdoor", *overrides, trial_dir=tmp_path / "resumed", stop={"train/step": 1})
    assert part[-1]["train/step"] == 1 and "train/acc" not in part[-1]  # stopped inside epoch 1
    rest = local_trial("backdoor", *overrides, trial_dir=tmp_path / "resumed")
    assert rest[0]["train/step"] == 2 and rest[0]["train/epoch"] == 1
    skip = {"perf/images_per_s", "time_total_s", "training_iteration"}
    assert {k: v for k, v in rest[-1].items() if k not in skip} == {k: v for k, v in full[-1].items() if k not in skip}


@pytest.mark.slow
def test_theory_smoke_sweep_reports_every_metric(shared_smoke_sweep):
    results, _, _ = shared_smoke_sweep("backdoor_theory")  # the report tests read it too
    assert len(results) == 2
    ratios = {}
    for result in results:
        assert result.error is None, result.error
        assert_finite_metrics(result.metrics, THEORY_METRICS)
        assert result.metrics["theory/step"] == 60
        ratios[result.config["poison_ratio"]] = result.metrics["theory/loss_drop_ratio"]
    assert ratios[0.1] > ratios[0.01] > 1


def test_wanet_keeps_backdoorbench_constant_lr_and_the_others_anneal():
    import torch

    from trainers.backdoor.loop import train_scheduler

    def lr_after(epochs: int, **fields) -> float:
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.01)
        scheduler = train_scheduler(optimizer, Config(**fields))
        for _ in range(epochs):
            optimizer.step()
            scheduler.step()
        return optimizer.param_groups[0]["lr"]

    assert lr_after(99, attack="wanet") == pytest.approx(0.01)  # MultiStepLR, first milestone 100
    assert lr_after(100, attack="wanet") == pytest.approx(0.001)
    assert lr_after(50, attack="badnets") == pytest.approx(0.005)  # cosine over 100 epochs
    assert lr_after(50, attack="wanet", lr_schedule="cosine") == pytest.approx(0.005)
    assert lr_after(50, attack="badnets", lr_schedule="constant") == pytest.approx(0.01)


def test_too_few_images_for_the_probe_groups_is_a_user_error(tmp_path):
    import torch

    from trainers.backdoor.loop import build_data

    cfg = Config(
        synthetic_data=True,
        data_dir=str(tmp_path / "d"),
        synthetic_train_size=20,
        finetune_fraction=0.95,
        synthetic_test_size=8,
        probe_size=8,
        coherence_size=4,
        poison_ratio=0.0,
    )
    with pytest.raises(UserError, match="probe_size: the training set leaves"):
        build_data(cfg, torch.device("cpu"))
