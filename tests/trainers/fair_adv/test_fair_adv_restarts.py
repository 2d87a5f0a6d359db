"""The final evaluation's restarts: the worst case over restarts and its noise, by hand."""

import pytest
import torch

from trainers.fair_adv import metrics


def test_worst_over_restarts_counts_an_image_robust_only_under_every_restart():
    y = torch.tensor([0, 1, 1, 2])
    r1 = torch.tensor([0, 1, 0, 2])  # image 2 falls
    r2 = torch.tensor([2, 1, 1, 2])  # image 0 falls
    worst = metrics.worst_over_restarts([r1, r2], y)
    assert worst.tolist() == [2, 1, 0, 2]


def test_restart_noise_by_hand():
    # classes 0 and 1, two images each; four restarts
    y = torch.tensor([0, 0, 1, 1])
    restarts = [
        torch.tensor([0, 0, 1, 0]),  # worst class 0.5 (class 1)
        torch.tensor([0, 0, 1, 1]),  # worst class 1.0
        torch.tensor([1, 0, 1, 1]),  # worst class 0.5 (class 0)
        torch.tensor([1, 1, 1, 1]),  # worst class 0.0 (class 0)
    ]
    noise = metrics.restart_noise(restarts, y, 2)
    assert noise["robust_acc_worst_class_restart_range"] == 1.0
    # first half's worst case: [0, 0, 1, 0] -> worst class 0.5; second half's: [1, 1, 1, 1] -> 0.0
    assert noise["robust_acc_worst_class_half_gap"] == 0.5
    with pytest.raises(ValueError):
        metrics.restart_noise(restarts[:1], y, 2)


def test_final_evaluation_takes_the_worst_case_over_restarts_and_reports_its_noise():
    """An untrained small CNN on random 8x8 images: the worst case over three restarts is at most
    any single restart's accuracy, and the noise metrics appear; with one restart they do not."""
    from raylab.config import from_dict
    from trainers.fair_adv import loop
    from trainers.fair_adv.config import Config
    from trainers.fair_adv.model import build_model

    torch.manual_seed(0)
    x = torch.randint(0, 256, (60, 1, 8, 8), dtype=torch.uint8)
    y = torch.arange(60) % 10
    model = build_model("small_cnn", 10, "digits8x8", width=4)
    base = dict(dataset="digits8x8", model="small_cnn", augment=False, autoattack="off", eps=0.3, step_size=0.1)
    one = loop.final_evaluation(model, x, y, 10, from_dict(Config, {**base, "eval_steps": 2}, "test"))
    three = loop.final_evaluation(
        model, x, y, 10, from_dict(Config, {**base, "eval_steps": 2, "eval_restarts": 3}, "test")
    )
    assert "final/robust_acc_worst_class_half_gap" not in one
    assert three["final/robust_acc"] <= one["final/robust_acc"]  # the first restart is the same draw
    assert 0 <= three["final/robust_acc_worst_class_restart_range"] <= 1
    assert "final/robust_acc_worst_class_half_gap" in three
