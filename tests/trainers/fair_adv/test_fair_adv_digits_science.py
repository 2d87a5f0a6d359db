"""Science on real images, where worst-class robust accuracy is not floored: paired intervals over
seeds for tri-regime against FRL, tri-regime against its own base loss, and FRL against its
uniform-weight control, through the workload's own train loop.

Each trial is ``fair_adv_digits.yaml`` run in this process (``raylab.train.run_local``) with the
arm's fields and a CPU-sized scale: scikit-learn's real 8x8 digits (1,438 train / 359 test, 300
of the training digits held out for validation), L-inf eps 0.15, PGD-5 training and PGD-10
evaluation of step 0.05, 15 epochs. At the MNIST protocol's eps 0.3 this scale is floored (the
worst digit's robust accuracy is 0 in nearly every arm and seed), so no contrast of worst-class
accuracy can show there. eps 0.15 was chosen on the validation split with seeds 100-102
(``TUNING_SEEDS``: every adversarially trained arm's best-validation worst digit well above 0,
clean training's at 0); the finding below uses seeds 0-4, none of which tuned it.

The arms: clean training (the positive control's reference), TRADES (beta 6), tri-regime on
TRADES, FRL-Reweight on TRADES (the reference's defaults: 10 epochs of TRADES, then its best
validation model fine-tuned for 5 at lr 1e-3; FRL's reported model is its best fine-tuning
epoch) and FRL's uniform-weight control (the same fine-tune, multipliers frozen at 0).

Statistic: the best-validation model's worst-class PGD-10 accuracy on all 359 test digits
(``final/robust_acc_worst_class``, the report's claim statistic); the last model's
(``final_last/...``) is printed beside it. A contrast is the per-seed paired difference; its
interval is the report's (``raylab.report.estimators.strata_interval``: percentile bootstrap
over seeds, 95%). The per-seed table is printed (``-s``) and copied into docs/workloads/fair_adv.md. What is
asserted: the positive control and that the worst class is not floored, then each contrast's
interval statement as measured over seeds 0-4, with how many seeds agree (docs/workloads/fair_adv.md).
"""

import multiprocessing
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from raylab import experiment as experiments
from raylab import train as raylab_train
from raylab.report.estimators import strata_interval
from raylab.run_folder import TrialFolder

SEEDS = [0, 1, 2, 3, 4]
TUNING_SEEDS = [100, 101, 102]  # chose eps 0.15 on validation; never used for the finding
WORKERS = int(os.environ.get("RAYLAB_SCIENCE_WORKERS", "2"))
# lr 0.1, /10 after 8 and 10 epochs; FRL trains TRADES for 10 and fine-tunes the best-validation
# model for the last 5 (at 1e-3, the schedule's own rate there), as fair_adv.yaml does at scale
SCALE = dict(
    dataset="digits8x8",
    val_size=300,
    cnn_width=16,
    epochs=15,
    lr_milestones=[8, 10],
    frl_finetune_epochs=5,
    eps=0.15,
    train_steps=5,
    step_size=0.05,
    eval_steps=10,
    eval_batch_size=500,
    tri_warmup_epochs=4,
    tri_boundary_ramp_epochs=4,
    autoattack="off",
    cw_steps=20,
    final_eval_last=True,
)
ARMS = {
    "standard": {"method": "standard"},
    "trades": {"method": "trades"},
    "tri_regime": {"method": "tri_regime", "base_loss": "trades"},
    "frl": {"method": "frl", "base_loss": "trades"},
    "control": {"method": "frl", "base_loss": "trades", "frl_rate_nat": 0.0, "frl_rate_bndy": 0.0},
}
CONTRASTS = {  # name: (arm, against)
    "tri-regime - FRL": ("tri_regime", "frl"),
    "tri-regime - TRADES (its base loss)": ("tri_regime", "trades"),
    "FRL - uniform control": ("frl", "control"),
}


def run_arm(job) -> dict:
    """One trial (``arm``, ``seed``) in this process, in ``folder``; its last report."""
    arm, seed, folder = job
    import torch

    torch.set_num_threads(1)
    experiment = experiments.load("fair_adv_digits", [f"stop.train/epoch={SCALE['epochs']}"])
    config = {**experiment.resolved_config(), **ARMS[arm], **SCALE, "seed": seed}
    rows = raylab_train.run_local(experiment, TrialFolder.at(Path(folder) / f"{arm}-{seed}"), config, verbose=False)
    assert rows[-1]["train/epoch"] == SCALE["epochs"]
    return rows[-1]


def run_arms(folder: Path, seeds: list[int]) -> dict[str, list[dict]]:
    jobs = [(arm, seed, str(folder)) for arm in ARMS for seed in seeds]
    # one process per core of the CI machine (each trial runs torch on one thread)
    with ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context("spawn")) as pool:
        last = dict(zip([(a, s) for a, s, _ in jobs], pool.map(run_arm, jobs)))
    return {arm: [last[(arm, seed)] for seed in seeds] for arm in ARMS}


def paired(found: dict, metric: str, arm: str, against: str) -> dict:
    """Per-seed differences ``arm - against`` of ``metric``, their mean, 95% interval and signs."""
    diffs = np.array([a[metric] - b[metric] for a, b in zip(found[arm], found[against])])
    low, high = strata_interval([diffs])
    return {
        "diffs": diffs,
        "mean": float(diffs.mean()),
        "low": low,
        "high": high,
        "above": int((diffs > 0).sum()),
        "below": int((diffs < 0).sum()),
    }


def show(name: str, p: dict) -> str:
    cells = " ".join(f"{d:+.3f}" for d in p["diffs"])
    return (
        f"{name:>36}: {cells} | mean {p['mean']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}]"
        f" | > 0 on {p['above']}/{len(p['diffs'])}, < 0 on {p['below']}"
    )


@pytest.mark.slow
@pytest.mark.long
def test_worst_class_contrasts_where_the_worst_class_is_not_floored(tmp_path):
    found = run_arms(tmp_path, SEEDS)
    worst, last_worst, clean = (
        "final/robust_acc_worst_class",
        "final_last/robust_acc_worst_class",
        "final/clean_acc",
    )
    print(f"\ndigits8x8, eps {SCALE['eps']}, PGD-{SCALE['eval_steps']} on the 359 test digits, seeds {SEEDS}")
    print("per seed: best-validation model's worst class / average robust / clean; last model's worst class")
    for arm, rows in found.items():
        cells = " | ".join(
            f"{r[worst]:.3f} / {r['final/robust_acc']:.3f} / {r[clean]:.3f}; {r[last_worst]:.3f}" for r in rows
        )
        print(
            f"{arm:>10} | {cells} | worst {statistics.mean(r[worst] for r in rows):.3f}"
            f" | best epochs {[r['best/epoch'] for r in rows]}"
        )
    results = {}
    for metric, label in (
        (worst, "worst class, best model"),
        (last_worst, "worst class, last model"),
        (clean, "clean"),
    ):
        print(f"paired differences ({label}: {metric})")
        for name, (arm, against) in CONTRASTS.items():
            results[(metric, name)] = paired(found, metric, arm, against)
            print(show(name, results[(metric, name)]))

    # positive control first: the instrument sees the known effect. Clean training leaves the
    # worst digit near 0 and little robust accuracy on every seed, and every adversarially trained
    # arm lifts both, on every seed: the worst class is not floored here
    for seed in range(len(SEEDS)):
        assert found["standard"][seed][worst] < 0.1 and found["standard"][seed]["final/robust_acc"] < 0.3
        for arm in ("trades", "tri_regime", "frl", "control"):
            row = found[arm][seed]
            assert row[worst] > 0.2, (arm, seed, row[worst])
            assert row["final/robust_acc"] > found["standard"][seed]["final/robust_acc"] + 0.3, (arm, seed)

    # the finding over seeds 0-4, as measured (the workload page's table; intervals 95%, bootstrap over seeds)
    tri_frl, tri_base, frl_ctl = (
        "tri-regime - FRL",
        "tri-regime - TRADES (its base loss)",
        "FRL - uniform control",
    )
    # the best-validation model (the claims' statistic): tri-regime's gains are not shown at 5
    # seeds (measured +0.042 [-0.030, +0.120] against FRL, +0.034 [-0.027, +0.097] against
    # TRADES; 3 of 5 seeds above, 2 below): picking the best of 15 epochs on 30 validation
    # digits a class adds noise of the size of the effect
    for name in (tri_frl, tri_base):
        p = results[(worst, name)]
        assert p["low"] < 0 < p["high"] and p["above"] == 3, (name, p)
    # FRL's class weights do not lift the worst class over the same fine-tune with uniform
    # weights (measured -0.014 [-0.026, -0.003]; no seed above, 3 below, 2 equal)
    p = results[(worst, frl_ctl)]
    assert p["high"] < 0.005 and p["above"] == 0, p
    # the last model: tri-regime's worst digit is above FRL's (+0.076 [+0.034, +0.118]; 4 of 5
    # seeds above, 1 equal) and above its own base loss's (+0.060 [+0.042, +0.074]; 5 of 5);
    # FRL against its control contains 0 (+0.012 [-0.011, +0.034])
    p = results[(last_worst, tri_frl)]
    assert p["low"] > 0.02 and p["above"] >= 4 and p["below"] == 0, p
    p = results[(last_worst, tri_base)]
    assert p["low"] > 0.02 and p["above"] == len(SEEDS), p
    p = results[(last_worst, frl_ctl)]
    assert p["low"] < 0 < p["high"], p
    # at equal clean accuracy: tri-regime within 0.01 of FRL on every bound (-0.001 [-0.005, +0.003])
    p = results[(clean, tri_frl)]
    assert -0.01 < p["low"] and p["high"] < 0.01, p
