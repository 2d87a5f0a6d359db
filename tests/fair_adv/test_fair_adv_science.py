"""Science at small scale: tri-regime beats PGD-AT on worst-class robust accuracy.

The task: three Gaussian classes in [0, 1]^2. Two are tight (std 0.04) and one is wide
(std 0.15), so the wide class has most of its samples near the decision boundaries and is by
far the worst class under attack (eps 0.05). 10% of the training labels are redrawn uniformly
(label noise). A 2-64-64-3 MLP is trained with the workload's own ``train_step`` for 30 epochs
(SGD 0.1, momentum 0.9, weight decay 5e-3, lr / 10 after epoch 22), PGD-5 training attack,
then evaluated with PGD-20 on 3000 clean-labelled test points.

The tri-regime parameters are the workload's defaults, with only the epoch counts scaled to
the 30-epoch budget (warm-up 5, ramp 5). Measured here (4 seeds): PGD-AT worst-class robust
accuracy 0.811-0.825, tri-regime 0.850-0.854, every seed better by 0.025 to 0.041.
"""

import pytest
import torch

from trainers.fair_adv import attack, metrics, reweight
from trainers.fair_adv.config import Config
from trainers.fair_adv.loop import lr_at
from trainers.fair_adv.step import History, train_step

EPS = 0.05
CENTERS = torch.tensor([[0.3, 0.3], [0.7, 0.3], [0.5, 0.65]])
STDS = torch.tensor([0.04, 0.04, 0.15])
HARD = 2



def make_data(n, seed, noise):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    x = (CENTERS[y] + STDS[y, None] * torch.randn(n, 2, generator=g)).clamp(0, 1)
    observed = y.clone()
    flip = torch.rand(n, generator=g) < noise
    observed[flip] = torch.randint(0, 3, (int(flip.sum()),), generator=g)
    return x, observed, y


def train_and_evaluate(method, seed, epochs=30, batch_size=200):
    cfg = Config(method=method, seed=seed, eps=EPS, step_size=EPS / 4, train_steps=5,
                 epochs=epochs, lr=0.1, momentum=0.9, weight_decay=5e-3,
                 lr_milestones=(int(0.75 * epochs),), batch_size=batch_size,
                 tri_warmup_epochs=5, tri_boundary_ramp_epochs=5)
    x, y, y_true = make_data(3000, 100 + seed, noise=0.1)
    x_test, _, y_test = make_data(3000, 200 + seed, noise=0.0)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                weight_decay=cfg.weight_decay)
    history = History.empty(len(y))
    order, attack_gen = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
    for epoch in range(cfg.epochs):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(cfg, epoch)
        threshold = reweight.loss_threshold(history.ema_loss, history.visits,
                                            cfg.tri_outlier_loss_quantile)
        perm = torch.randperm(len(y), generator=order)
        for start in range(0, len(y), cfg.batch_size):
            index = perm[start : start + cfg.batch_size]
            train_step(model, optimizer, x[index], y[index], index, cfg, epoch=epoch,
                       history=history, loss_threshold=threshold, generator=attack_gen)

    def pgd20(m, xb, yb):
        return attack.pgd(m, xb, yb, eps=EPS, step_size=EPS / 4, steps=20, generator=attack_gen)

    preds = metrics.evaluate(model, x_test, y_test, 3, pgd20, batch_size=1000)
    per_class = metrics.per_class_accuracy(preds["adv_pred"], y_test, 3)
    gated = ((history.visits >= cfg.tri_min_history)
             & (history.ema_correct <= cfg.tri_outlier_max_correct)
             & (history.ema_loss >= threshold))
    return per_class, gated, y != y_true


@pytest.mark.slow
def test_tri_regime_beats_pgd_at_on_worst_class_robust_accuracy():
    seeds = range(4)
    pgd_worst, tri_worst = [], []
    for seed in seeds:
        pgd_class, _, _ = train_and_evaluate("pgd_at", seed)
        tri_class, gated, noisy = train_and_evaluate("tri_regime", seed)
        assert pgd_class.argmin() == HARD  # the wide class is the worst one under PGD-AT
        pgd_worst.append(metrics.worst_class(pgd_class))
        tri_worst.append(metrics.worst_class(tri_class))
        # the reliability gate finds most label noise, and few clean samples (wide-class points
        # deep inside a tight class, which no classifier gets right either)
        recall, false_rate = gated[noisy].float().mean(), gated[~noisy].float().mean()
        assert recall > 0.5 and false_rate < 0.05, (seed, recall, false_rate)
    gains = [t - p for t, p in zip(tri_worst, pgd_worst)]
    assert all(g > 0.005 for g in gains), (pgd_worst, tri_worst)
    assert sum(gains) / len(gains) > 0.015, (pgd_worst, tri_worst)
