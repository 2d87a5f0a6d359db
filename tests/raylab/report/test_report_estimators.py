"""The aggregate estimators (raylab.report.estimators): values by hand, a planted difference the
instrument must see (its positive control), and rliable 1.2.0's own numbers on fixed score
matrices (long: it builds rliable's environment once, under ~/.cache/raylab)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from raylab.report import estimators as est


def test_point_estimates_by_hand():
    scores = np.array([[0.0, 1.0, 4.0], [2.0, 3.0, 8.0]])  # 2 runs x 3 tasks; task means 1, 2, 6
    assert est.mean_score(scores) == pytest.approx(3.0)
    assert est.median_score(scores) == pytest.approx(2.0)
    # sorted: 0 1 2 3 4 8; floor(6/4) = 1 cut from each end: mean of 1 2 3 4
    assert est.iqm(scores) == pytest.approx(2.5)
    # min(x, 1): 0 1 1 1 1 1 -> mean 5/6
    assert est.optimality_gap(scores, 1.0) == pytest.approx(1 / 6)
    assert est.score_distribution(scores, [0.5, 3.5]).tolist() == pytest.approx([5 / 6, 2 / 6])
    # task 0: x {0, 2} vs y {1, 2}: pairs 0>1 no, 0>2 no, 2>1 yes, 2=2 half -> 1.5/4
    x, y = np.array([[0.0], [2.0]]), np.array([[1.0], [2.0]])
    assert est.probability_of_improvement(x, y) == pytest.approx(0.375)
    assert est.probability_of_improvement(x, x) == pytest.approx(0.5)
    assert est.mean_over_strata([np.array([1.0, 3.0]), np.array([10.0])]) == pytest.approx(6.0)


def test_planted_difference_moves_the_probability_of_improvement_and_its_interval():
    """Positive control of the instrument: Y is X plus noise; adding a planted shift to X moves
    P(X > Y) from about 0.5 (interval holding 0.5) to near 1 (interval above 0.5), and the
    interval of the mean difference from straddling 0 to excluding it."""
    rng = np.random.default_rng(7)
    base = rng.normal(size=(5, 4))  # 5 seeds x 4 tasks
    noise = 0.3 * rng.normal(size=base.shape)
    same = base + noise - noise.mean(axis=0)  # no difference on average in any task
    null_p = est.probability_of_improvement(same, base)
    null_low, null_high = est.improvement_interval([same[:, j] for j in range(4)], [base[:, j] for j in range(4)])
    assert 0.3 < null_p < 0.7 and null_low < 0.5 < null_high
    shifted = same + 3.0
    p = est.probability_of_improvement(shifted, base)
    low, high = est.improvement_interval([shifted[:, j] for j in range(4)], [base[:, j] for j in range(4)])
    assert p > 0.95 and 0.5 < low <= p <= high
    # the paired mean difference per task (the claims' estimator): interval around the plant
    diffs = [(shifted - base)[:, j] for j in range(4)]
    d_low, d_high = est.strata_interval(diffs)
    assert d_low < est.mean_over_strata(diffs) < d_high and d_low > 2.5 and d_high < 3.5
    null = [(same - base)[:, j] for j in range(4)]
    n_low, n_high = est.strata_interval(null)
    assert n_low < 0 < n_high
    # aggregates move with the plant, their intervals do not overlap
    for fn in ("mean", "median", "iqm"):
        plain, moved = est.stratified_interval(fn, base), est.stratified_interval(fn, base + 3.0)
        assert moved[0] > plain[1], fn
        assert moved[0] - plain[0] == pytest.approx(3.0, abs=0.6)


def test_intervals_are_reproducible_and_refuse_one_seed():
    scores = np.arange(12.0).reshape(4, 3)
    assert est.stratified_interval("iqm", scores) == est.stratified_interval("iqm", scores)
    with pytest.raises(ValueError, match="two or more"):
        est.stratified_interval("mean", scores[:1])
    with pytest.raises(ValueError, match="two or more"):
        est.strata_interval([np.array([1.0, 2.0]), np.array([3.0])])


# ------------------------------------------------------------------------ rliable cross-check

RLIABLE_ENV = Path(os.environ.get("RAYLAB_RLIABLE_ENV", Path.home() / ".cache" / "raylab" / "rliable-1.2.0"))
BASE_PYTHON = os.environ.get("RAYLAB_RLIABLE_PYTHON", "/root/.pyenv/versions/3.11.7/bin/python")
# rliable 1.2.0 (its repository archived in 2025) imports arch, whose 7.x fails to import beside
# pandas 3: the cross-check environment pins pandas below 3.
RLIABLE_PACKAGES = ("rliable==1.2.0", "pandas<3")
TOLERANCE = 0.05
"""Interval ends from two random streams of 20,000 resamples: within this share of the width."""

RLIABLE_SCRIPT = r"""
import json, sys
import numpy as np
from rliable import library, metrics

data = json.load(sys.stdin)
out = {}
for name, m in data["matrices"].items():
    m = np.asarray(m)
    point = {"mean": metrics.aggregate_mean(m), "median": metrics.aggregate_median(m),
             "iqm": metrics.aggregate_iqm(m), "optimality_gap": metrics.aggregate_optimality_gap(m, 1.0)}
    fns = {k: (lambda f: (lambda x: np.array([f(x)])))(f) for k, f in [
        ("mean", metrics.aggregate_mean), ("median", metrics.aggregate_median), ("iqm", metrics.aggregate_iqm),
        ("optimality_gap", lambda x: metrics.aggregate_optimality_gap(x, 1.0))]}
    intervals = {}
    for k, f in fns.items():
        np.random.seed(0)
        _, ci = library.get_interval_estimates({"a": m}, f, reps=data["reps"])
        intervals[k] = ci["a"][:, 0].tolist()
    np.random.seed(0)
    prof, prof_ci = library.create_performance_profile({"a": m}, data["taus"], reps=data["profile_reps"])
    out[name] = {"point": {k: float(v) for k, v in point.items()}, "interval": intervals,
                 "profile": prof["a"].tolist(), "profile_ci": prof_ci["a"].tolist()}
x, y = np.asarray(data["x"]), np.asarray(data["y"])
np.random.seed(0)
p, p_ci = library.get_interval_estimates({"xy": [x, y]}, lambda a, b: np.array([metrics.probability_of_improvement(a, b)]),
                                         reps=data["reps"])
out["improvement"] = {"point": float(p["xy"][0]), "interval": p_ci["xy"][:, 0].tolist()}
print(json.dumps(out))
"""


def rliable_python() -> Path:
    """rliable 1.2.0's own environment: made once (a venv of a Python without raylab's pins)."""
    python = RLIABLE_ENV / "bin" / "python"
    probe = [str(python), "-c", "import rliable.library, rliable.metrics"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    if not Path(BASE_PYTHON).exists():
        pytest.skip(f"no {BASE_PYTHON} to make rliable's environment from (set RAYLAB_RLIABLE_PYTHON)")
    subprocess.run([BASE_PYTHON, "-m", "venv", str(RLIABLE_ENV)], check=True)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *RLIABLE_PACKAGES], capture_output=True, text=True
    )
    if install.returncode != 0:
        pytest.skip(f"could not install {' '.join(RLIABLE_PACKAGES)} (offline?): {install.stderr[-300:]}")
    return python


@pytest.mark.long
def test_estimators_match_rliable_on_fixed_score_matrices():
    rng = np.random.default_rng(2021)
    matrices = {
        "normal_5x7": rng.normal(1.0, 0.8, size=(5, 7)),
        "skewed_3x10": rng.lognormal(0.0, 1.0, size=(3, 10)),
        "ties_10x2": rng.integers(0, 4, size=(10, 2)).astype(float) / 2,
        "one_task_8x1": rng.normal(size=(8, 1)),
    }
    x, y = rng.normal(0.3, 1.0, size=(5, 6)), rng.normal(0.0, 1.0, size=(4, 6))
    taus = np.linspace(-1.0, 3.0, 9).tolist()
    # rliable's bootstrap (arch) draws resamples one at a time: 20,000 for intervals and its
    # own default 2,000 for profiles keep its side to a few minutes
    reps, profile_reps = 20_000, 2_000
    payload = {
        "matrices": {k: v.tolist() for k, v in matrices.items()},
        "x": x.tolist(),
        "y": y.tolist(),
        "taus": taus,
        "reps": reps,
        "profile_reps": profile_reps,
    }
    result = subprocess.run(
        [str(rliable_python()), "-c", RLIABLE_SCRIPT],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    theirs = json.loads(result.stdout)
    point_fns = {
        "mean": est.mean_score,
        "median": est.median_score,
        "iqm": est.iqm,
        "optimality_gap": lambda m: est.optimality_gap(m, 1.0),
    }
    for name, m in matrices.items():
        ref = theirs[name]
        for fn, f in point_fns.items():
            assert f(m) == pytest.approx(ref["point"][fn], rel=1e-12, abs=1e-12), (name, fn)
            # both are percentile intervals of 20,000 stratified resamples from different random
            # streams: they agree to Monte Carlo error, a small share of the interval's width
            low, high = est.stratified_interval(fn, m, resamples=reps)
            theirs_low, theirs_high = ref["interval"][fn]
            width = max(theirs_high - theirs_low, 1e-9)
            assert abs(low - theirs_low) <= TOLERANCE * width + 1e-9, (name, fn, low, theirs_low)
            assert abs(high - theirs_high) <= TOLERANCE * width + 1e-9, (name, fn, high, theirs_high)
        assert est.score_distribution(m, taus).tolist() == pytest.approx(ref["profile"], abs=1e-12)
        band_low, band_high = est.profile_interval(m, taus, resamples=profile_reps)
        step = 2.0 / m.size  # a profile moves in steps of one run-task score: two of them
        assert np.abs(band_low - np.asarray(ref["profile_ci"][0])).max() <= step + 1e-9, name
        assert np.abs(band_high - np.asarray(ref["profile_ci"][1])).max() <= step + 1e-9, name
    assert est.probability_of_improvement(x, y) == pytest.approx(theirs["improvement"]["point"], abs=1e-12)
    low, high = est.improvement_interval([x[:, j] for j in range(6)], [y[:, j] for j in range(6)], resamples=reps)
    ref = theirs["improvement"]["interval"]
    width = ref[1] - ref[0]
    assert abs(low - ref[0]) <= TOLERANCE * width and abs(high - ref[1]) <= TOLERANCE * width, (low, high, ref)
    print(
        f"\nrliable 1.2.0 ({sys.platform}): every point estimate equal, intervals within {TOLERANCE:.0%} of their width"
    )
