"""Probing frozen molecule embeddings: the TDC metrics and the linear / MLP probes.

Metrics (as TDC's evaluator computes them; ``y`` true values, ``s`` predictions or scores):

- ``mae``: mean |y - s|.
- ``spearman``: Pearson correlation of the average ranks of y and of s.
- ``roc-auc``: P(s_pos > s_neg) + P(s_pos = s_neg) / 2 over positive/negative pairs, computed
  from average ranks: (sum of positive ranks - P (P + 1) / 2) / (P N).
- ``pr-auc``: average precision, sum over distinct score thresholds k (high to low) of
  (R_k - R_{k-1}) * P_k with precision P_k and recall R_k at threshold k (sklearn's definition).

Probes (features standardized with train statistics):

- ``linear``: ridge regression (closed form) for regression tasks, L2 logistic regression
  (L-BFGS) for classification, the penalty picked on the validation split from a small grid.
- ``mlp``: one hidden layer (ReLU, dropout), Adam, early stopping on the validation metric.
- ``gbm``: scikit-learn's histogram gradient boosting (``HistGradientBoostingRegressor`` /
  ``Classifier``, squared error / log loss, learning rate 0.05) on the same features (columns
  constant on the training set dropped); the leaves, minimum leaf size and feature fraction
  per split (``GBM_GRID``, 8 settings) and the number of boosting iterations
  (every ``GBM_STAGE`` up to ``max_iter``, read off the staged predictions) chosen by the
  validation metric alone; no early stopping on an inner split of the training set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

LOWER_IS_BETTER = {"mae"}
CLASSIFICATION_METRICS = {"roc-auc", "pr-auc"}
RIDGE_ALPHAS = (1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
LOGISTIC_L2 = (1e-4, 1e-3, 1e-2, 1e-1)
GBM_GRID = {
    "learning_rate": (0.05,),
    "max_leaf_nodes": (15, 63),
    "min_samples_leaf": (5, 20),
    "max_features": (0.3, 1.0),
}
GBM_STAGE = 25


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x``, ties given the mean of the ranks they span (scipy's 'average')."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    starts = np.concatenate([[True], sorted_x[1:] != sorted_x[:-1]])
    group = np.cumsum(starts) - 1
    first = np.nonzero(starts)[0]
    last = np.concatenate([first[1:], [len(x)]]) - 1
    ranks = np.empty(len(x))
    ranks[order] = (first[group] + last[group]) / 2.0 + 1.0
    return ranks


def mae(y: np.ndarray, s: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(y, float) - np.asarray(s, float))))


def spearman(y: np.ndarray, s: np.ndarray) -> float:
    ry, rs = average_ranks(y), average_ranks(s)
    ry, rs = ry - ry.mean(), rs - rs.mean()
    denom = math.sqrt(float((ry**2).sum() * (rs**2).sum()))
    return float((ry * rs).sum() / denom) if denom > 0 else float("nan")


def roc_auc(y: np.ndarray, s: np.ndarray) -> float:
    y = np.asarray(y).astype(bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    ranks = average_ranks(s)
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def pr_auc(y: np.ndarray, s: np.ndarray) -> float:
    y = np.asarray(y).astype(bool)
    pos = int(y.sum())
    if pos == 0:
        return float("nan")
    order = np.argsort(-np.asarray(s, dtype=np.float64), kind="mergesort")
    s_sorted, y_sorted = np.asarray(s, dtype=np.float64)[order], y[order]
    last_of_threshold = np.nonzero(np.concatenate([s_sorted[1:] != s_sorted[:-1], [True]]))[0]
    tp = np.cumsum(y_sorted)[last_of_threshold]
    predicted = last_of_threshold + 1
    precision = tp / predicted
    recall = tp / pos
    return float(np.sum(np.diff(np.concatenate([[0.0], recall])) * precision))


METRICS = {"mae": mae, "spearman": spearman, "roc-auc": roc_auc, "pr-auc": pr_auc}


def score(metric: str, y: np.ndarray, s: np.ndarray) -> float:
    """The named metric (``mae``, ``spearman``, ``roc-auc``, ``pr-auc``)."""
    return METRICS[metric](y, s)


def better(metric: str, a: float, b: float) -> bool:
    """Whether metric value ``a`` is strictly better than ``b`` (NaN is never better)."""
    if math.isnan(a):
        return False
    if math.isnan(b):
        return True
    return a < b if metric in LOWER_IS_BETTER else a > b


@dataclass
class Standardizer:
    """Per-column mean/std of the training features (constant columns left at zero)."""

    mean: torch.Tensor
    std: torch.Tensor

    @classmethod
    def fit(cls, x: torch.Tensor) -> "Standardizer":
        std = x.std(dim=0, unbiased=False)
        return cls(x.mean(dim=0), torch.where(std > 1e-8, std, torch.ones_like(std)))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


def ridge_fit(x: torch.Tensor, y: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights and bias minimizing ||x w + b - y||^2 + alpha ||w||^2 (x standardized)."""
    x64, y64 = x.double(), y.double()
    xm, ym = x64.mean(0), y64.mean()
    xc, yc = x64 - xm, y64 - ym
    n, d = xc.shape
    if d <= n:
        w = torch.linalg.solve(xc.T @ xc + alpha * torch.eye(d, dtype=xc.dtype), xc.T @ yc)
    else:  # dual form: fewer molecules than features
        w = xc.T @ torch.linalg.solve(xc @ xc.T + alpha * torch.eye(n, dtype=xc.dtype), yc)
    return w.float(), (ym - xm @ w).float()


def logistic_fit(x: torch.Tensor, y: torch.Tensor, l2: float, steps: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    """L2-regularized logistic regression by L-BFGS: mean BCE + l2 ||w||^2."""
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros((), requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(x @ w + b, y.float()) + l2 * (w**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def linear_probe(
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_valid: torch.Tensor,
    y_valid: torch.Tensor,
    x_test: torch.Tensor,
    metric: str,
) -> tuple[np.ndarray, float, float]:
    """Fit the linear probe; return (test predictions, validation metric, chosen penalty)."""
    classify = metric in CLASSIFICATION_METRICS
    best = (None, float("nan"), float("nan"))
    for penalty in LOGISTIC_L2 if classify else RIDGE_ALPHAS:
        w, b = (logistic_fit if classify else ridge_fit)(x_train, y_train, penalty)
        valid = score(metric, y_valid.numpy(), (x_valid @ w + b).numpy())
        if best[0] is None or better(metric, valid, best[1]):
            best = ((w, b), valid, penalty)
    (w, b), valid, penalty = best
    return (x_test @ w + b).numpy(), valid, penalty


class MLPProbe(nn.Module):
    """One hidden layer: Linear, ReLU, Dropout, Linear to one output."""

    def __init__(self, in_dim: int, hidden: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def mlp_loss(model: MLPProbe, x: torch.Tensor, y: torch.Tensor, classify: bool) -> torch.Tensor:
    out = model(x)
    if classify:
        return nn.functional.binary_cross_entropy_with_logits(out, y.float())
    return nn.functional.mse_loss(out, y.float())


def mean_predictor(y_train: np.ndarray, n_test: int, metric: str) -> np.ndarray:
    """The baseline that ignores the molecule: the training mean (a constant score)."""
    return np.full(n_test, float(np.mean(y_train)))


def gbm_probe(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_valid: np.ndarray,
    y_valid: np.ndarray,
    x_test: np.ndarray,
    metric: str,
    max_iter: int = 500,
    seed: int = 0,
) -> tuple[np.ndarray, float, dict]:
    """Fit the gradient-boosting probe; return (test predictions, validation metric, chosen settings).

    Every combination of ``GBM_GRID`` is boosted to ``max_iter`` iterations; the validation
    metric is read every ``GBM_STAGE`` iterations from the staged predictions, and the
    (settings, iterations) with the best one predict the test set. Classification scores are
    the predicted probability of the positive class.
    """
    import itertools

    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    classify = metric in CLASSIFICATION_METRICS
    x_train, x_valid, x_test = (np.asarray(a, dtype=np.float32) for a in (x_train, x_valid, x_test))
    varies = x_train.std(0) > 0  # columns constant on the training set cannot be split on
    x_train, x_valid, x_test = x_train[:, varies], x_valid[:, varies], x_test[:, varies]
    y_train = np.asarray(y_train)
    best: tuple = (None, float("nan"), {})
    for values in itertools.product(*GBM_GRID.values()):
        settings = dict(zip(GBM_GRID, values))
        model_cls = HistGradientBoostingClassifier if classify else HistGradientBoostingRegressor
        model = model_cls(max_iter=max_iter, early_stopping=False, random_state=seed, **settings)
        model.fit(x_train, y_train.astype(int) if classify else y_train)
        staged = model.staged_predict_proba(x_valid) if classify else model.staged_predict(x_valid)
        for it, pred in enumerate(staged, 1):
            if it % GBM_STAGE and it != max_iter:
                continue
            valid = score(metric, np.asarray(y_valid), pred[:, 1] if classify else pred)
            if best[0] is None or better(metric, valid, best[1]):
                best = (model, valid, {**settings, "iterations": it})
    model, valid, settings = best
    staged = model.staged_predict_proba(x_test) if classify else model.staged_predict(x_test)
    for it, pred in enumerate(staged, 1):
        if it == settings["iterations"]:
            return (pred[:, 1] if classify else pred), valid, settings
    raise AssertionError("unreachable: the chosen iteration is within max_iter")
