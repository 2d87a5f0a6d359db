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


def probe_rows(asr: list[float], drop: list[float], **last) -> list[dict]:
    """A trial's reports: one per early probe (steps 12, 24, ...), each carrying the probe's
    values, then an epoch row that repeats them at a later step, then ``last``."""
    rows = [
        {"train/step": 12 * (i + 1), "early/probe_step": 12 * (i + 1), "early/asr": a, "early/loss_drop_poison": d}
        for i, (a, d) in enumerate(zip(asr, drop))
    ]
    rows.append({**rows[-1], "train/step": rows[-1]["train/step"] + 5})
    rows.append({**rows[-1], "eval/clean_acc": 0.85, "eval/clean_acc_floor": 0.2, **last})
    return rows


def test_the_report_contrasts_the_trigger_arm_with_the_label_flip_arm(tmp_path):
    """Trigger arm minus label-flip arm, paired by seed: the poison-only loss drop at the trigger
    arm's last probe before its ASR reaches 0.5 (the label-flip arm read at the same probe), the
    vs-relabel gap at the end and the trigger-dominant neurons; the label-flip arm's low ASR does
    not fail the "backdoor is learned" control, which reads the trigger arm only."""
    nan = float("nan")
    trials = {  # (mode, seed): rows
        ("trigger", 0): probe_rows([nan, 0.2, 0.9, 1.0], [0.1, 1.0, 3.0, 4.0], **{"eval/asr": 0.99}),
        ("trigger", 1): probe_rows([0.1, 0.3, 0.4, 0.45], [0.2, 0.5, 0.8, 2.0], **{"eval/asr": 0.6}),
        ("label_flip", 0): probe_rows([0.1, 0.1, 0.2, 0.1], [0.3, 0.4, 0.5, 0.6], **{"eval/asr": 0.1}),
        ("label_flip", 1): probe_rows([0.1, 0.1, 0.1, 0.1], [0.1, 0.1, 0.3, 0.4], **{"eval/asr": 0.12}),
    }
    gaps = {("trigger", 0): 1.5, ("trigger", 1): 0.9, ("label_flip", 0): -0.5, ("label_flip", 1): -0.2}
    neurons = {("trigger", 0): 6, ("trigger", 1): 5, ("label_flip", 0): 0, ("label_flip", 1): 1}
    for key, rows in trials.items():
        rows[-1].update({"early/loss_drop_gap_vs_relabel": gaps[key], "neurons/trigger_dominant_count": neurons[key]})
    run = load_run(
        str(
            write_run(
                tmp_path,
                {"poison_mode": ["trigger", "label_flip"], "seed": [0, 1]},
                [
                    {
                        "params": {"attack": "badnets", "poison_ratio": 0.1, "poison_mode": mode, "seed": seed},
                        "rows": rows,
                    }
                    for (mode, seed), rows in trials.items()
                ],
                workload="backdoor",
                metric="eval/asr",
            )
        )
    )
    claims = {c["name"]: c for c in evaluate_claims(run, REPORT, {})}
    drop = claims["early_drop_trigger_not_label"]
    assert all(c["state"] == "passed" for c in drop["controls"]), drop["controls"]
    # seed 0: ASR reaches 0.5 at step 36, so step 24: 1.0 - 0.4; seed 1 never does: step 48, 2.0 - 0.4
    assert drop["rows"][0]["estimate"] == pytest.approx((0.6 + 1.6) / 2) and drop["rows"][0]["agree"] == 2
    gap = claims["early_gap_vs_relabel"]
    assert gap["rows"][0]["estimate"] == pytest.approx((2.0 + 1.1) / 2) and gap["rows"][0]["agree"] == 2
    count = claims["trigger_neurons_not_label"]
    assert count["rows"][0]["estimate"] == pytest.approx(5.0) and count["rows"][0]["n_seeds"] == 2
