"""bf16 autocast + channels_last (the CUDA default, ``amp_bf16: auto``) against float32: the
backdoor train loop's own loss trajectory (``train/loss`` per epoch) on real MNIST digits
(``backdoor_digits``: ResNet-18 at width 4, batch 64, 10% BadNets poisoning).

Tolerance: every epoch's mean training loss within 5% of the first epoch's float32 loss
(``TOLERANCE``). The 200-step version is ``long``; its positive control (float32 at half the
learning rate) must leave that band. Measured here (torch 2.13, Xeon with AMX, one thread):
largest gap 0.037 against a band of 0.106, the control's 0.40; 35 s for the three runs. The
default run keeps a 20-step check that the switch reaches the training step.
"""

from __future__ import annotations

import pytest

TOLERANCE = 0.05


def trajectory(
    local_trial,
    tmp_path,
    name: str,
    *,
    bf16: bool,
    train_size: int,
    epochs: int,
    lr: float = 0.02,
    dataset: str = "mnist5k",
) -> list[float]:
    rows = local_trial(
        "backdoor_digits",
        f"config.dataset={dataset}",
        f"config.train_size={train_size}",
        f"config.epochs={epochs}",
        "config.early_epochs=0",
        "config.finetune_epochs=0",
        "config.eval_every=1000",
        "config.poison_ratio=0.1",
        "config.seed=0",
        f"config.lr={lr}",
        f"config.amp_bf16={str(bf16).lower()}",
        f"config.channels_last={str(bf16).lower()}",
        trial_dir=tmp_path / name,
    )
    per_epoch = {row["train/epoch"]: row["train/loss"] for row in rows if row.get("train/epoch")}
    assert sorted(per_epoch) == list(range(1, epochs + 1))
    return [per_epoch[e] for e in range(1, epochs + 1)]


def largest_gap(a: list[float], b: list[float]) -> float:
    return max(abs(p - q) for p, q in zip(a, b))


@pytest.mark.long
def test_bf16_channels_last_loss_trajectory_matches_float32(local_trial, tmp_path, one_thread):
    size = dict(train_size=1600, epochs=8)  # 25 steps an epoch: 200 steps
    fp32 = trajectory(local_trial, tmp_path, "fp32", bf16=False, **size)
    band = TOLERANCE * fp32[0]
    assert fp32[-1] < 0.2 * fp32[0]  # it learns
    control = trajectory(local_trial, tmp_path, "half-lr", bf16=False, lr=0.01, **size)
    print("fp32", fp32, "half lr", control, "band", band)
    assert largest_gap(control, fp32) > 2 * band  # positive control: the instrument sees a change
    bf16 = trajectory(local_trial, tmp_path, "bf16", bf16=True, **size)
    print("bf16 + channels_last", bf16, "gap", largest_gap(bf16, fp32))
    assert largest_gap(bf16, fp32) <= band


def test_bf16_switch_reaches_the_training_step(local_trial, tmp_path, one_thread):
    """10 steps: ``amp_bf16: true`` changes the loop's losses (autocast ran), by less than
    twice the band of the long test (early training is noisier)."""
    size = dict(train_size=320, epochs=2, dataset="digits8x8")  # scikit-learn's: a quick load
    fp32 = trajectory(local_trial, tmp_path, "fp32", bf16=False, **size)
    bf16 = trajectory(local_trial, tmp_path, "bf16", bf16=True, **size)
    print("fp32", fp32, "bf16 + channels_last", bf16)
    assert bf16 != fp32
    assert largest_gap(bf16, fp32) <= 2 * TOLERANCE * fp32[0]
