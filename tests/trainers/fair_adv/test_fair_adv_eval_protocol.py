"""fair_adv's test-set protocol: PGD-20 on a fixed class-stratified subset every epoch
(``eval_size``), and the selected (best-validation) checkpoint on the whole test set at the end
(``final/*``, PGD-20 as ``final/robust_acc``), as Rice et al. report the early-stopped model."""

from __future__ import annotations

import math

import torch

from raylab import experiment as experiments
from trainers.fair_adv import METRICS, metrics
from trainers.fair_adv import loop as fair_loop
from trainers.fair_adv.config import Config


def test_defaults_evaluate_a_subset_per_epoch_and_the_whole_test_set_at_the_end():
    assert Config().eval_size == 1000 and Config().final_eval_size is None
    for name in ("fair_adv", "fair_adv_long", "fair_adv_tri"):
        config = experiments.load(name).resolved_config()
        assert (config["eval_size"], config["final_eval_size"]) == (1000, None), name
    y = torch.arange(10).repeat_interleave(1000)  # CIFAR-10's test labels: 1,000 per class
    chosen = fair_loop.test_subset(y, 1000)
    assert torch.equal(torch.bincount(y[chosen]), torch.full((10,), 100))
    assert torch.equal(chosen, fair_loop.test_subset(y, 1000))  # fixed: the same images every call
    assert torch.equal(fair_loop.test_subset(y, None), torch.arange(len(y)))


def test_loop_evaluates_the_subset_each_epoch_and_the_best_model_on_every_test_image(
    local_trial, tmp_path, monkeypatch
):
    calls = []
    evaluate = metrics.evaluate

    def spy(model, x, y, *args, **kwargs):
        calls.append((x.clone(), y.clone()))
        return evaluate(model, x, y, *args, **kwargs)

    monkeypatch.setattr(metrics, "evaluate", spy)
    rows = local_trial(
        "fair_adv",
        f"config.data_dir={tmp_path / 'data'}",
        "config.method=pgd_at",
        "config.autoattack='off'",
        "config.epochs=2",
        "config.lr_milestones=[1]",
        "config.eval_size=40",
        "config.final_eval_size=null",
        "config.val_size=60",
    )
    assert [r["train/epoch"] for r in rows] == [1, 2]
    # per epoch: validation (60), the test subset (40); at the end PGD-20 and CW on all 100, for
    # the best model and (fair_adv.yaml's final_eval_last) the last one
    assert [len(x) for x, _ in calls] == [60, 40, 60, 40, 100, 100, 100, 100]
    subset = [calls[1], calls[3]]
    assert torch.equal(subset[0][0], subset[1][0])  # the same images every epoch
    counts = torch.bincount(subset[0][1], minlength=10)
    test_counts = torch.bincount(calls[4][1], minlength=10)
    assert torch.all((counts - test_counts * 40 / 100).abs() <= 1)  # class-stratified
    last = rows[-1]
    for name in ("final/robust_acc", "final/robust_acc_worst_class", "final/cw_acc", "final/clean_acc"):
        assert name in METRICS and math.isfinite(last[name]), name
    assert len(last["final/robust_acc_per_class"]) == 10
    assert last["final/cw_acc"] <= last["final/clean_acc"] + 1e-9
    assert last["final/robust_acc"] <= last["final/clean_acc"] + 1e-9
