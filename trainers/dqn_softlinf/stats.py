"""Statistics of the claims: the time average a trial reports, and paired ratios over seeds.

A claim read off one report depends on when training stops (on FeatureMDP the exact residual
ratio, soft-linf over MSE, moves by 10-20% between neighbouring reports). Every figure a claim
uses is therefore a **time average**, the mean over the last half of a trial's reports
(``time_average``; the loop reports it for the figures in ``TIME_AVERAGED`` as
``<metric>_last_half_mean``), and a comparison is a paired statistic over seeds of the ratio
of two arms' time averages (``paired_ratios``, ``summary``).
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

TIME_AVERAGED = (
    "bellman/residual_linf_exact",
    "bellman/qstar_dist_linf",
    "bellman/greedy_value_gap_exact",
    "inner/progress_ratio_exact",
    "bellman/residual_linf_insample",
    "bellman/residual_linf_heldout",
    "bellman/residual_linf_expected",
    "bellman/residual_linf_expected_debiased",
    "bellman/residual_linf_shared",
    "bellman/residual_linf_shared_debiased",
    "episode/return_mean",
)
"""The figures the loop also reports time-averaged, as ``<metric>_last_half_mean``."""

SUFFIX = "_last_half_mean"


def time_averaged_name(metric: str) -> str:
    """``bellman/residual_linf_exact`` -> ``bellman/residual_linf_exact_last_half_mean``."""
    return metric + SUFFIX


def time_average(values: Sequence[float]) -> float:
    """The mean over the last half of a trial's reports.

    With reports ``x_1 .. x_n`` (oldest first) and ``h = floor(n / 2)``:
    ``tavg(x) = 1 / (n - h) * sum_{i = h+1}^{n} x_i``. One report: that report; NaN for none.
    NaN reports (a metric not yet measured) are left out before halving.
    """
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], np.float64)
    if len(x) == 0:
        return math.nan
    return float(x[len(x) // 2 :].mean())


def last_half_mean(rows: Iterable[dict], key: str) -> float:
    """``time_average`` of ``key`` over a trial's reported rows (rows without it left out)."""
    return time_average([row[key] for row in rows if key in row])


def t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean of ``x``: ``mean -+ t_{(1+level)/2, n-1} s / sqrt(n)``."""
    from scipy import stats

    x = np.asarray(x, np.float64)
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean() - half), float(x.mean() + half)


def bootstrap_interval(x: np.ndarray, level: float = 0.95, draws: int = 10_000) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x`` (fixed generator)."""
    x = np.asarray(x, np.float64)
    means = np.random.default_rng(0).choice(x, size=(draws, len(x))).mean(1)
    lo, hi = np.quantile(means, [0.5 - level / 2, 0.5 + level / 2])
    return float(lo), float(hi)


def sign_test(x: np.ndarray) -> tuple[int, float]:
    """How many ratios are below 1, and the one-sided binomial p-value of that many or more."""
    from scipy import stats

    x = np.asarray(x)
    below = int((x < 1).sum())
    return below, float(stats.binomtest(below, len(x), 0.5, alternative="greater").pvalue)


def paired_ratios(
    histories: dict, key: str, arm: str = "soft_linf", base: str = "mse", reduce=time_average
) -> np.ndarray:
    """Per seed, ``reduce(arm's values of key) / reduce(base's values)``; ``histories`` maps
    ``(loss, seed)`` to that trial's rows. Seeds are those both arms ran, in order."""
    seeds = sorted({s for (loss, s) in histories if loss == arm} & {s for (loss, s) in histories if loss == base})

    def value(loss, seed):
        return reduce([row[key] for row in histories[loss, seed] if key in row])

    return np.array([value(arm, s) / value(base, s) for s in seeds])


def summary(x: np.ndarray) -> dict[str, float]:
    """Mean, 95% t and bootstrap intervals, and the sign test of per-seed ratios ``x``."""
    below, p = sign_test(x)
    t_lo, t_hi = t_interval(x)
    b_lo, b_hi = bootstrap_interval(x)
    return {
        "mean": float(np.mean(x)),
        "t_lo": t_lo,
        "t_hi": t_hi,
        "boot_lo": b_lo,
        "boot_hi": b_hi,
        "below": below,
        "n": len(x),
        "p": p,
    }


def summary_text(name: str, x: np.ndarray) -> str:
    s = summary(x)
    return (
        f"{name:>9}: mean {s['mean']:.3f}, 95% t [{s['t_lo']:.3f}, {s['t_hi']:.3f}], bootstrap "
        f"[{s['boot_lo']:.3f}, {s['boot_hi']:.3f}], below 1 on {s['below']}/{s['n']} (sign test p = {s['p']:.3f})"
    )
