"""Science at small scale: tri-regime against PGD-AT and FRL on the same (PGD-AT) loss.

The task: three Gaussian classes in [0, 1]^2. Two are tight (std 0.04) and one is wide
(std 0.15), so the wide class has most of its samples near the decision boundaries and is by
far the worst class under attack (eps 0.05). 10% of the training labels are redrawn uniformly
(label noise). A 2-64-64-3 MLP is trained with the workload's own ``train_epoch`` for 30 epochs
(SGD 0.1, momentum 0.9, weight decay 5e-3, lr / 10 after epochs 15 and 18), PGD-5 training
attack, then evaluated with PGD-20 on 3000 clean-labelled test points. FRL takes the model of
PGD-AT's first 20 epochs and fine-tunes it for the last 10 at lr 1e-3 with its validation-driven
class weights (900 held-out noisy-label points, about 300 per class).

The tri-regime parameters are the workload's defaults, with only the epoch counts scaled to
the 30-epoch budget (warm-up 5, ramp 5). Measured figures: the workload page's science section.
"""

import pytest
import torch

from trainers.fair_adv import attack, metrics, reweight
from trainers.fair_adv.config import Config
from trainers.fair_adv.loop import frl_state, frl_step, lr_at
from trainers.fair_adv.step import History, train_epoch

EPS = 0.05
CENTERS = torch.tensor([[0.3, 0.3], [0.7, 0.3], [0.5, 0.65]])
STDS = torch.tensor([0.04, 0.04, 0.15])
HARD = 2
# every arm: 30 epochs, lr 0.1, /10 after 15 and 18 (so the last 12 run at 1e-3); FRL trains
# PGD-AT for 20 epochs and fine-tunes for the last 10 at 1e-3, the reference's 1e-3 / 0.1 ratio
MILESTONES = (15, 18)
FINETUNE = 10


def make_data(n, seed, noise):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    x = (CENTERS[y] + STDS[y, None] * torch.randn(n, 2, generator=g)).clamp(0, 1)
    observed = y.clone()
    flip = torch.rand(n, generator=g) < noise
    observed[flip] = torch.randint(0, 3, (int(flip.sum()),), generator=g)
    return x, observed, y


def train_and_evaluate(method, seed, base_loss="default", epochs=30, batch_size=200, **overrides):
    """Train one arm with the workload's own ``train_epoch`` (and, for FRL, the loop's multiplier
    update); return its per-class PGD-20 test accuracy, the outlier gate's flags, the noise mask
    and the last epoch's per-class regime counts."""
    cfg = Config(
        method=method,
        base_loss=base_loss,
        seed=seed,
        eps=EPS,
        step_size=EPS / 4,
        train_steps=5,
        epochs=epochs,
        lr=0.1,
        momentum=0.9,
        weight_decay=5e-3,
        lr_milestones=MILESTONES,
        batch_size=batch_size,
        augment=False,
        tri_warmup_epochs=5,
        tri_boundary_ramp_epochs=5,
        frl_finetune_epochs=FINETUNE,
        frl_lr=0.1 * 0.01,
        **overrides,
    )
    x, y, y_true = make_data(3000, 100 + seed, noise=0.1)
    x_val, y_val, _ = make_data(900, 300 + seed, noise=0.1)  # held out from the training data
    x_test, _, y_test = make_data(3000, 200 + seed, noise=0.0)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(2, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    history = History.empty(len(y))
    order, attack_gen = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
    lam = {k: torch.zeros(3, dtype=torch.float64) for k in ("nat", "bndy", "margin")}
    start = cfg.finetune_start()

    def pgd20(m, xb, yb, share=None):
        return attack.pgd(m, xb, yb, eps=EPS, step_size=EPS / 4, steps=20, generator=attack_gen, share=share)

    for epoch in range(cfg.epochs):
        if epoch == start:  # FRL's first fine-tuning epoch: update from the pre-trained model
            val = metrics.evaluate(model, x_val, y_val, 3, pgd20, batch_size=1000)
            lam = frl_step(lam, val, y_val, 3, cfg, 1)
        elif epoch > start:
            val = metrics.evaluate(model, x_val, y_val, 3, pgd20, batch_size=1000)
            lam = frl_step(lam, val, y_val, 3, cfg, epoch - start + 1)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(cfg, epoch) if epoch < start else cfg.frl_lr
        threshold = reweight.loss_threshold(history.ema_loss, history.visits, cfg.tri_outlier_loss_quantile)
        totals = train_epoch(
            model,
            optimizer,
            x,
            y,
            cfg,
            epoch=epoch,
            history=history,
            frl=frl_state(lam, cfg) if epoch >= start else None,
            order_gen=order,
            aug_gen=None,
            attack_gen=attack_gen,
            num_classes=3,
        )

    preds = metrics.evaluate(model, x_test, y_test, 3, pgd20, batch_size=1000)
    per_class = metrics.per_class_accuracy(preds["adv_pred"], y_test, 3)
    gated = (
        (history.visits >= cfg.tri_min_history)
        & (history.ema_correct <= cfg.tri_outlier_max_correct)
        & (history.ema_loss >= threshold)
    )
    return per_class, gated, y != y_true, totals["regimes"]


@pytest.mark.slow
@pytest.mark.long
def test_tri_regime_beats_pgd_at_and_frl_on_the_same_base_loss():
    """Worst-class PGD-20 accuracy of PGD-AT, tri-regime and FRL, all on the PGD-AT loss, at equal
    epochs, over 4 seeds.

    FRL runs as published (fine-tuning a PGD-AT model at lr / 100 with the reference's rates,
    cap and halving) except for its tolerances: with the reference's 0.1 the constraints rarely
    bind on this task (two of the four seeds end identical to PGD-AT), so the test uses tau = 0,
    the strictest constraint.
    """
    pgd_worst, tri_worst, frl_worst = [], [], []
    for seed in range(4):
        pgd_class, _, _, _ = train_and_evaluate("pgd_at", seed)
        tri_class, gated, noisy, regimes = train_and_evaluate("tri_regime", seed)
        frl_class, _, _, _ = train_and_evaluate("frl", seed, base_loss="pgd_at", frl_tau_nat=0.0, frl_tau_bndy=0.0)
        assert pgd_class.argmin() == HARD  # the wide class is the worst one under PGD-AT
        pgd_worst.append(metrics.worst_class(pgd_class))
        tri_worst.append(metrics.worst_class(tri_class))
        frl_worst.append(metrics.worst_class(frl_class))
        # the reliability gate finds most label noise, and few clean samples (wide-class points
        # deep inside a tight class, which no classifier gets right either)
        recall, false_rate = gated[noisy].float().mean(), gated[~noisy].float().mean()
        assert recall > 0.5 and false_rate < 0.05, (seed, recall, false_rate)
        # per class (last epoch), the gate lands most on the worst class: about 0.10-0.13 of its
        # visits against 0.06-0.07 for the tight classes (about 10% x 2/3 of each class's labels
        # are wrong; the wide class adds its points deep inside a tight class)
        outlier_frac = regimes[:, 0].double() / regimes.sum(1).double()
        assert outlier_frac.argmax() == HARD and outlier_frac[HARD] < 0.16, (seed, outlier_frac)
        assert ((outlier_frac[:HARD] > 0.04) & (outlier_frac[:HARD] < 0.1)).all(), (seed, outlier_frac)
    found = {"pgd_at": pgd_worst, "tri_regime": tri_worst, "frl": frl_worst}
    over_pgd = [t - p for t, p in zip(tri_worst, pgd_worst)]
    over_frl = [t - f for t, f in zip(tri_worst, frl_worst)]
    assert all(g > 0.005 for g in over_pgd) and sum(over_pgd) / 4 > 0.015, found
    assert all(g > 0.005 for g in over_frl) and sum(over_frl) / 4 > 0.01, found
    # FRL's fine-tuning at lr 1e-3 moves the worst class little: within 0.015 of its base
    assert all(abs(f - p) < 0.015 for f, p in zip(frl_worst, pgd_worst)), found
