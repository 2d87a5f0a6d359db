"""The uncertainty a figure draws around a mean over seeds: ``std``, ``sem`` or ``ci95``.

With ``n`` trials (seeds and repeats) of values ``x_1..x_n``, mean ``m`` and sample standard
deviation ``s`` (ddof=1), the interval drawn is:

- ``std``: ``m ± s`` (the spread of one seed's result);
- ``sem``: ``m ± s / sqrt(n)`` (the standard error of the mean);
- ``ci95``: a 95% interval for the mean. Curves use the t interval
  ``m ± t_{0.975, n-1} s / sqrt(n)`` at each x (closed form, so a curve of many points costs
  nothing); Versus points and bars use the percentile bootstrap over seeds of the claims table
  (``raylab.report.estimators.strata_interval``), which may be asymmetric.

Fewer than two trials: no interval (NaN), whatever the choice.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Uncertainty = Literal["std", "sem", "ci95"]
UNCERTAINTIES = ("std", "sem", "ci95")
DEFAULT = "std"
FIGURE_RESAMPLES = 2_000
"""Bootstrap resamples per drawn point (the claims table uses ``estimators.RESAMPLES``)."""

WORDS = {
    "std": "mean ± one sample std over seeds",
    "sem": "mean ± standard error over seeds",
    "ci95": "mean and 95% interval over seeds",
}


def describe(kind: str, figure: str) -> str:
    """What the band or error bar of a ``figure`` kind (``Curve``, ``Versus``, ``Bars``) is."""
    if kind != "ci95":
        return WORDS[kind]
    how = "t interval" if figure == "Curve" else "percentile bootstrap"
    return f"{WORDS[kind]} ({how})"


def check(kind: str, where: str) -> str:
    if kind not in UNCERTAINTIES:
        raise ValueError(f"{where}: uncertainty must be one of {', '.join(UNCERTAINTIES)}, got {kind!r}")
    return kind


def curve_band(stacked: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and band (low, high) per column of ``stacked`` (trials x points, NaN where a trial
    has no value): ``m ± s``, ``m ± s/sqrt(n)`` or ``m ± t_{0.975,n-1} s/sqrt(n)`` with ``n``
    the trials that have a value at that point; NaN where ``n < 2``."""
    check(kind, "curve")
    stacked = np.asarray(stacked, dtype=float)
    counts = np.isfinite(stacked).sum(axis=0)
    with np.errstate(all="ignore"):
        mean = np.nanmean(stacked, axis=0)
        half = np.full(stacked.shape[1], np.nan)
        several = counts > 1
        std = np.nanstd(stacked[:, several], axis=0, ddof=1)
        n = counts[several]
        if kind == "std":
            half[several] = std
        elif kind == "sem":
            half[several] = std / np.sqrt(n)
        else:
            from scipy import stats  # only here: spec imports this module

            half[several] = stats.t.ppf(0.975, n - 1) * std / np.sqrt(n)
    return mean, mean - half, mean + half


def point_interval(values, kind: str) -> tuple[float, float]:
    """``(low, high)`` around the mean of ``values`` (one group's trials): ``m ± s``,
    ``m ± s/sqrt(n)``, or the 95% percentile bootstrap interval of the mean; NaNs below two."""
    check(kind, "point")
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if x.size < 2:
        return float("nan"), float("nan")
    mean, std = float(x.mean()), float(x.std(ddof=1))
    if kind == "std":
        return mean - std, mean + std
    if kind == "sem":
        return mean - std / np.sqrt(x.size), mean + std / np.sqrt(x.size)
    if std == 0.0:
        return mean, mean
    from raylab.report.estimators import strata_interval

    return strata_interval([x], resamples=FIGURE_RESAMPLES)


def error_bars(means, intervals) -> np.ndarray:
    """Matplotlib's ``yerr`` (2 x N, below and above the mean) from intervals; 0 where none."""
    means = np.asarray(means, dtype=float)
    low, high = (np.asarray(v, dtype=float) for v in zip(*intervals)) if len(intervals) else (means, means)
    below, above = means - low, high - means
    return np.vstack([np.where(np.isfinite(below), below, 0), np.where(np.isfinite(above), above, 0)])
