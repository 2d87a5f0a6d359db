"""The label-flip-only arm (``poison_mode: label_flip``): the poisoned images are relabelled to the
target and never triggered, and the report contrasts the trigger arm with it."""

import pytest
import torch

from raylab import experiment as experiments
from raylab.errors import UserError
from raylab.report.evidence import evaluate_claims
from raylab.report.run_view import load_run
from tests.raylab.report.test_report_units import write_run
from trainers.backdoor.config import Config
from trainers.backdoor.figures import REPORT
from trainers.backdoor.loop import build_data


def test_label_flip_relabels_the_poisoned_images_without_triggering_them(tmp_path):
    common = dict(
        synthetic_data=True,
        data_dir=str(tmp_path / "d"),
        synthetic_train_size=200,
        synthetic_test_size=50,
        probe_size=8,
        coherence_size=4,
        probe_bn_size=32,
        poison_ratio=0.1,
    )
    triggered = build_data(Config(**common), torch.device("cpu"))
    flipped = build_data(Config(**common, poison_mode="label_flip"), torch.device("cpu"))
    clean = build_data(Config(**{**common, "poison_ratio": 0.0}), torch.device("cpu"))
    idx = flipped.poison_idx
    assert len(idx) == 20 and torch.equal(idx, triggered.poison_idx)
    assert (flipped.train_y[idx] == 0).all() and torch.equal(flipped.train_y, triggered.train_y)
    assert torch.equal(flipped.train_x, clean.train_x)  # no training image triggered
    assert (triggered.train_x[idx][..., -3:, -3:] == 255).all()  # the trigger arm's are
    # The probes and the evaluation are the trigger arm's: triggered poisoned group, triggered test set.
    for group in ("poison", "relabel", "target", "clean"):
        assert torch.equal(flipped.probe_x[group], triggered.probe_x[group]), group
    assert torch.equal(flipped.trig_x, triggered.trig_x)


def test_label_flip_needs_a_fixed_poisoned_set():
    with pytest.raises(UserError, match="poison_mode: label_flip needs a fixed poisoned set"):
        experiments.load("backdoor", ["config.attack=wanet", "config.poison_mode=label_flip"])
    with pytest.raises(UserError, match="poison_mode"):
        experiments.load("backdoor", ["config.poison_mode=relabel"])
    assert Config().poison_mode == "trigger"


def test_digits_experiment_sweeps_the_label_flip_arm_and_probes_until_asr_rises():
    experiment = experiments.load("backdoor_digits")
    arms = experiment.search["variant"]["grid"]
    assert {"poison_ratio": 0.1, "poison_mode": "label_flip"} in arms and {"poison_ratio": 0.0} in arms
    assert len(experiment.search["seed"]["grid"]) >= 5
    assert 2 <= experiment.config["early_epochs"] <= experiment.config["epochs"]


def test_the_report_contrasts_the_trigger_arm_with_the_label_flip_arm(tmp_path):
    """Trigger arm minus label-flip arm, paired by seed: the vs-relabel loss drop and the
    trigger-dominant neurons; the label-flip arm's low ASR does not fail the "backdoor is learned"
    control, which reads the trigger arm only."""
    values = {  # (mode, seed): (vs-relabel gap, neurons, asr)
        ("trigger", 0): (1.5, 6, 0.99),
        ("trigger", 1): (0.9, 5, 0.98),
        ("label_flip", 0): (-0.5, 0, 0.1),
        ("label_flip", 1): (-0.2, 1, 0.12),
    }
    trials = [
        {
            "params": {"attack": "badnets", "poison_ratio": 0.1, "poison_mode": mode, "seed": seed},
            "rows": [
                {
                    "eval/clean_acc": 0.85,
                    "eval/clean_acc_floor": 0.2,
                    "eval/asr": asr,
                    "early/loss_drop_gap_vs_relabel": gap,
                    "neurons/trigger_dominant_count": neurons,
                }
            ],
        }
        for (mode, seed), (gap, neurons, asr) in values.items()
    ]
    run = load_run(
        str(
            write_run(
                tmp_path,
                {"poison_mode": ["trigger", "label_flip"], "seed": [0, 1]},
                trials,
                workload="backdoor",
                metric="eval/asr",
            )
        )
    )
    claims = {c["name"]: c for c in evaluate_claims(run, REPORT, {})}
    drop = claims["early_drop_trigger_not_label"]
    assert all(c["state"] == "passed" for c in drop["controls"]), drop["controls"]
    assert drop["rows"][0]["estimate"] == pytest.approx((2.0 + 1.1) / 2) and drop["rows"][0]["agree"] == 2
    neurons = claims["trigger_neurons_not_label"]
    assert neurons["rows"][0]["estimate"] == pytest.approx(5.0) and neurons["rows"][0]["n_seeds"] == 2
