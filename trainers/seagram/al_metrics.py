"""How active-learning arms are judged: threshold-free scores of the criticality classifier on
solver-labelled held-out candidate flips, and the solver calls an arm needs to match passive.

Pure functions of arrays; the loop computes their inputs (``loop.heldout_scores``) and
``trainers/seagram/al_table.py`` turns a run's trials into paired intervals over seeds.
"""

from __future__ import annotations

import numpy as np


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for the binary ``labels`` (1: non-critical).

    AUROC = P(s+ > s-) + 1/2 P(s+ = s-) over a uniformly drawn positive s+ and negative s-
    (the Mann-Whitney U statistic divided by n+ n-); ties count one half. NaN without both
    classes.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1).astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    # average ranks (1-based) over ties
    start = 0
    for end in range(1, len(s) + 1):
        if end == len(s) or sorted_s[end] != sorted_s[start]:
            ranks[order[start:end]] = (start + end + 1) / 2
            start = end
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def precision_at_recall(scores: np.ndarray, labels: np.ndarray, recall: float) -> float:
    """Precision of ``[s >= t]`` at the highest threshold ``t`` whose recall reaches ``recall``.

    With the scores sorted in decreasing order and cut only between distinct values,
    ``precision = TP(t) / #{s >= t}`` at the largest ``t`` with ``TP(t) / n+ >= recall``
    (a threshold-free comparison of classifiers: each is read at the same recall). NaN
    without positives.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1).astype(np.int64)
    n_pos = int(y.sum())
    if not n_pos:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    tp = np.cumsum(y)
    cut = np.r_[s[1:] != s[:-1], True]  # positions that end a run of equal scores
    for k in np.flatnonzero(cut):
        if tp[k] / n_pos >= recall - 1e-12:
            return float(tp[k] / (k + 1))
    return float(tp[-1] / len(y))


def at_threshold(scores: np.ndarray, labels: np.ndarray, threshold: float) -> tuple[float, float]:
    """``(recall, precision)`` of ``[s >= threshold]``: the attack's operating point (a flip is
    allowed when ``p_noncritical >= threshold``). Precision is NaN when nothing passes."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1).astype(bool)
    passed = s >= threshold
    recall = float((passed & y).sum() / y.sum()) if y.any() else float("nan")
    precision = float((passed & y).sum() / passed.sum()) if passed.any() else float("nan")
    return recall, precision


def calls_to_match(budgets, values, target: float) -> float:
    """The solver calls (label budget) at which an arm's curve first reaches ``target``.

    ``budgets`` ascending, ``values[i]`` the arm's score at ``budgets[i]`` (higher is better).
    Between the first budget that reaches the target and the one before it, the budget is
    interpolated linearly: ``b = b0 + (target - v0) / (v1 - v0) (b1 - b0)``; the first budget
    when already reached there; ``inf`` when never reached on the curve.
    """
    b = np.asarray(budgets, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    for i in range(len(b)):
        if v[i] >= target:
            if i == 0 or v[i] == v[i - 1]:
                return float(b[i])
            return float(b[i - 1] + (target - v[i - 1]) / (v[i] - v[i - 1]) * (b[i] - b[i - 1]))
    return float("inf")


def paired_interval(diffs) -> tuple[float, float, float]:
    """Mean of paired per-seed differences ``d`` and its 95% t interval over seeds,
    ``mean ± t_{0.975, n-1} s / sqrt(n)`` (scipy's Student t, as the report's claims use it: it
    covers at a handful of seeds, where the percentile bootstrap does not); NaN bounds below two
    finite values."""
    from scipy import stats

    d = np.asarray(diffs, dtype=np.float64)
    d = d[np.isfinite(d)]
    if not len(d):
        return float("nan"), float("nan"), float("nan")
    if len(d) < 2:
        return float(d.mean()), float("nan"), float("nan")
    sem = stats.sem(d)
    if sem == 0:  # every seed alike: the interval is the point
        return float(d.mean()), float(d.mean()), float(d.mean())
    lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=sem)
    return float(d.mean()), float(lo), float(hi)
