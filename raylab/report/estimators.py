"""Interval estimates over seeds: the aggregate estimators of rliable (Agarwal et al., "Deep RL
at the Edge of the Statistical Precipice", NeurIPS 2021), written with numpy and scipy.

A score matrix has shape ``(runs, tasks)``: ``scores[n, m]`` is run ``n`` (a seed) on task ``m``
(a game). Every interval is a percentile bootstrap (``scipy.stats.bootstrap``,
``method="percentile"``) that resamples the runs of each task independently, the *stratified
bootstrap*: the uncertainty of repeating the experiment with new seeds on the same tasks
(rliable's default, ``task_bootstrap=False``). ``tests/raylab/report/test_report_estimators.py`` checks
these against rliable 1.2.0 on fixed score matrices (``RAYLAB_LONG_TESTS=1``).

With few seeds a percentile bootstrap interval is too narrow (its coverage is below 95%): the
report labels intervals from fewer than ``WIDE_BELOW`` seeds as wide and gives no verdict below
``VERDICT_MIN_SEEDS``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95
"""Coverage of every interval."""
RESAMPLES = 10_000
"""Bootstrap resamples (rliable uses 50,000 for aggregates and 2,000 for profiles)."""
SEED = 0
"""The bootstrap's generator seed: a report's intervals are the same every time it is built."""
WIDE_BELOW = 5
"""Intervals from fewer seeds than this are labelled wide."""
VERDICT_MIN_SEEDS = 3
"""Fewer seeds (per stratum) than this: inconclusive, whatever the interval says."""

Interval = tuple[float, float]


# ------------------------------------------------------------------------ point estimates


def _runs_tasks(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2:
        raise ValueError(f"a score matrix is (runs, tasks), got shape {scores.shape}")
    return scores


def mean_score(scores: np.ndarray) -> float:
    """Mean over tasks of each task's mean over runs: ``(1/M) sum_m (1/N) sum_n x[n, m]``."""
    return float(np.mean(np.mean(_runs_tasks(scores), axis=0)))


def median_score(scores: np.ndarray) -> float:
    """Median over tasks of each task's mean over runs: ``median_m (1/N) sum_n x[n, m]``."""
    return float(np.median(np.mean(_runs_tasks(scores), axis=0)))


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all ``N x M`` run-task scores: sorted ``x_(1) <= ... <= x_(NM)``,
    the mean of the middle half, ``IQM = 2/(NM) sum_{i = NM/4 + 1}^{3NM/4} x_(i)`` (a 25% trimmed
    mean, ``scipy.stats.trim_mean(x, 0.25)`` over the flattened matrix; with ``NM`` not a
    multiple of 4 it cuts ``floor(NM/4)`` scores from each end)."""
    return float(stats.trim_mean(_runs_tasks(scores), 0.25, axis=None))


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> float:
    """How far below ``gamma`` the scores fall, scores above it counting as ``gamma``:
    ``gamma - (1/NM) sum_{n,m} min(x[n, m], gamma)`` (lower is better; 0 at or above target)."""
    return float(gamma - np.mean(np.minimum(_runs_tasks(scores), gamma)))


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """Average probability that a run of X beats a run of Y on the same task:
    ``P(X > Y) = (1/M) sum_m (1/(N_x N_y)) sum_{i,j} S(x[i, m], y[j, m])``, ``S(a, b)`` = 1 if
    ``a > b``, 1/2 if equal, 0 otherwise (the Mann-Whitney U statistic of task ``m`` over
    ``N_x N_y``). 0.5: neither is better."""
    x, y = _runs_tasks(x), _runs_tasks(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"X has {x.shape[1]} tasks and Y {y.shape[1]}")
    wins = np.sign(x[:, None, :] - y[None, :, :])  # (N_x, N_y, M): +1, 0, -1
    return float(np.mean(np.mean((wins + 1) / 2, axis=(0, 1))))


def score_distribution(scores: np.ndarray, taus: Sequence[float]) -> np.ndarray:
    """Performance profile: for each threshold ``tau``, the fraction of all run-task scores
    above it, ``F(tau) = (1/NM) sum_{n,m} 1[x[n, m] > tau]`` (rliable's run-score distribution)."""
    flat = _runs_tasks(scores).ravel()
    return np.mean(flat[:, None] > np.asarray(taus, dtype=float)[None, :], axis=0)


def mean_over_strata(strata: Sequence[np.ndarray]) -> float:
    """A claim's estimate: the mean over strata (games, tasks) of each stratum's mean over
    seeds, ``(1/S) sum_s (1/n_s) sum_i v[s, i]``; every stratum weighs the same."""
    return float(np.mean([np.mean(np.asarray(v, dtype=float)) for v in strata]))


def improvement_over_strata(x: Sequence[np.ndarray], y: Sequence[np.ndarray]) -> float:
    """``probability_of_improvement`` with a different number of runs per stratum allowed:
    ``(1/S) sum_s P(X_s > Y_s)``."""
    return float(
        np.mean(
            [
                probability_of_improvement(np.asarray(a, float)[:, None], np.asarray(b, float)[:, None])
                for a, b in zip(x, y)
            ]
        )
    )


# ------------------------------------------------------------------------ intervals


def _bootstrap(samples: list[np.ndarray], statistic: Callable, resamples: int, seed: int):
    result = stats.bootstrap(
        samples,
        statistic,
        paired=False,
        vectorized=True,
        method="percentile",
        confidence_level=LEVEL,
        n_resamples=resamples,
        batch=max(1, min(resamples, 2_000)),
        rng=np.random.default_rng(seed),
    )
    return result.confidence_interval.low, result.confidence_interval.high


def stratified_interval(
    fn: str, scores: np.ndarray, *, gamma: float = 1.0, resamples: int = RESAMPLES, seed: int = SEED
) -> Interval:
    """95% percentile interval of an aggregate (``"mean"``, ``"median"``, ``"iqm"``,
    ``"optimality_gap"``) of a ``(runs, tasks)`` matrix, runs resampled within each task."""
    scores = _runs_tasks(scores)
    if scores.shape[0] < 2:
        raise ValueError("an interval needs two or more runs per task")

    def statistic(*columns, axis=-1):
        m = np.stack(columns, axis=-1)  # (..., runs, tasks)
        if fn == "mean":
            return m.mean(axis=-2).mean(axis=-1)
        if fn == "median":
            return np.median(m.mean(axis=-2), axis=-1)
        if fn == "iqm":
            return stats.trim_mean(m.reshape(*m.shape[:-2], -1), 0.25, axis=-1)
        if fn == "optimality_gap":
            return gamma - np.minimum(m, gamma).reshape(*m.shape[:-2], -1).mean(axis=-1)
        raise ValueError(f"unknown aggregate {fn!r}")

    low, high = _bootstrap([scores[:, j] for j in range(scores.shape[1])], statistic, resamples, seed)
    return float(low), float(high)


def profile_interval(
    scores: np.ndarray, taus: Sequence[float], *, resamples: int = 2_000, seed: int = SEED
) -> tuple[np.ndarray, np.ndarray]:
    """95% percentile band of ``score_distribution`` at each ``tau`` (stratified bootstrap)."""
    scores, taus = _runs_tasks(scores), np.asarray(taus, dtype=float)
    if scores.shape[0] < 2:
        raise ValueError("an interval needs two or more runs per task")

    def statistic(*columns, axis=-1):
        m = np.stack(columns, axis=-1)
        flat = m.reshape(*m.shape[:-2], -1)
        return np.moveaxis((flat[..., None] > taus).mean(axis=-2), -1, 0)  # (taus, ...)

    low, high = _bootstrap([scores[:, j] for j in range(scores.shape[1])], statistic, resamples, seed)
    return np.asarray(low), np.asarray(high)


def improvement_interval(
    x: Sequence[np.ndarray], y: Sequence[np.ndarray], *, resamples: int = RESAMPLES, seed: int = SEED
) -> Interval:
    """95% percentile interval of ``improvement_over_strata``: the runs of X and of Y resampled
    independently within each stratum (rliable's ``StratifiedIndependentBootstrap``)."""
    x = [np.asarray(a, dtype=float) for a in x]
    y = [np.asarray(b, dtype=float) for b in y]
    if min(len(a) for a in [*x, *y]) < 2:
        raise ValueError("an interval needs two or more runs of each arm per stratum")
    strata = len(x)

    def statistic(*samples, axis=-1):
        probs = []
        for a, b in zip(samples[:strata], samples[strata:]):
            wins = np.sign(a[..., :, None] - b[..., None, :])
            probs.append(((wins + 1) / 2).mean(axis=(-2, -1)))
        return np.mean(probs, axis=0)

    low, high = _bootstrap([*x, *y], statistic, resamples, seed)
    return float(low), float(high)


def strata_interval(strata: Sequence[np.ndarray], *, resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """95% percentile interval of ``mean_over_strata``: seeds resampled within each stratum."""
    strata = [np.asarray(v, dtype=float) for v in strata]
    if min(len(v) for v in strata) < 2:
        raise ValueError("an interval needs two or more seeds per stratum")

    def statistic(*samples, axis=-1):
        return np.mean([s.mean(axis=-1) for s in samples], axis=0)

    low, high = _bootstrap(strata, statistic, resamples, seed)
    return float(low), float(high)


def difference_interval(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 2_000, seed: int = SEED
) -> Interval:
    """95% percentile interval of ``mean(a) - mean(b)``, each resampled independently (two
    table cells of different trials)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(len(a), len(b)) < 2:
        raise ValueError("an interval needs two or more values on each side")
    low, high = _bootstrap([a, b], lambda x, y, axis=-1: x.mean(axis=-1) - y.mean(axis=-1), resamples, seed)
    return float(low), float(high)


def t_interval(values: Sequence[float], *, level: float = LEVEL) -> Interval:
    """Student-t interval of the mean of ``n`` values (seeds): with mean ``m`` and sample
    standard deviation ``s`` (ddof=1), ``m ± t_{(1+level)/2, n-1} s / sqrt(n)``.

    Exact for normal values at any ``n``, so it covers at ``n = 5`` where the percentile bootstrap
    of the mean (``strata_interval``) is too narrow: the bootstrap's spread is ``s sqrt((n-1)/n) /
    sqrt(n)`` with normal quantiles, against ``t_{0.975,4} = 2.78`` here (on normal samples of
    5 with a known mean: t 0.955, percentile bootstrap 0.815 coverage over 400 samples,
    ``tests/raylab/report/test_interval_coverage.py``)."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"a t interval needs two or more values, got {x.size}")
    mean, sem = float(x.mean()), float(x.std(ddof=1)) / np.sqrt(x.size)
    half = float(stats.t.ppf((1 + level) / 2, x.size - 1)) * sem
    return mean - half, mean + half


def strata_t_interval(strata: Sequence[np.ndarray], *, level: float = LEVEL) -> Interval:
    """95% t interval of ``mean_over_strata``, the small-sample interval a claim reports.

    With ``S`` strata, stratum ``k`` having ``n_k`` seeds of mean ``m_k`` and sample variance
    ``s_k^2``: the estimate ``m = (1/S) sum_k m_k`` has variance ``V = (1/S^2) sum_k v_k``,
    ``v_k = s_k^2 / n_k``, and the interval is ``m ± t_{(1+level)/2, d} sqrt(V)`` with the
    Welch-Satterthwaite degrees of freedom ``d = (sum_k v_k)^2 / sum_k (v_k^2 / (n_k - 1))``.
    One stratum: ``t_interval``, ``d = n - 1``. Every stratum constant: the point ``(m, m)``."""
    strata = [np.asarray(v, dtype=float) for v in strata]
    if min(len(v) for v in strata) < 2:
        raise ValueError("an interval needs two or more seeds per stratum")
    mean = float(np.mean([v.mean() for v in strata]))
    parts = np.array([v.var(ddof=1) / len(v) for v in strata])
    total = float(parts.sum())
    if total == 0.0:
        return mean, mean
    dof = total**2 / float(sum(p**2 / (len(v) - 1) for p, v in zip(parts, strata)))
    half = float(stats.t.ppf((1 + level) / 2, dof)) * np.sqrt(total) / len(strata)
    return mean - half, mean + half
