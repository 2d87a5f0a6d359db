"""Coverage at small n, where it is known: normal samples with a known mean. The interval a claim
reports over five seeds must cover the true mean about 95% of the time; the percentile bootstrap
of the mean does not (its spread is the plug-in ``s sqrt((n-1)/n)`` with normal quantiles)."""

import numpy as np

from raylab.report.estimators import strata_interval, strata_t_interval, t_interval

TRUE_MEAN = 0.3
N_SEEDS = 5
REPLICATES = 400


def coverage(interval, samples) -> float:
    hits = [low <= TRUE_MEAN <= high for low, high in map(interval, samples)]
    return float(np.mean(hits))


def test_t_interval_covers_at_five_seeds_and_the_percentile_bootstrap_does_not():
    samples = np.random.default_rng(7).normal(TRUE_MEAN, 0.05, size=(REPLICATES, N_SEEDS))
    t_cov = coverage(t_interval, samples)
    boot_cov = coverage(lambda x: strata_interval([x], resamples=1_000), samples)
    print(f"coverage at n = {N_SEEDS}, {REPLICATES} samples: t {t_cov:.3f}, percentile bootstrap {boot_cov:.3f}")
    # binomial sd of a 95% coverage over 400 samples: 0.011
    assert 0.925 <= t_cov <= 0.975, t_cov
    assert boot_cov <= 0.90 and boot_cov < t_cov - 0.04, (boot_cov, t_cov)


def test_stratified_t_interval_covers_with_unequal_strata():
    """Two strata (tasks) of 5 and 4 seeds with different spreads: the mean of the stratum means."""
    rng = np.random.default_rng(11)
    hits = []
    for _ in range(REPLICATES):
        a, b = rng.normal(0.1, 0.02, 5), rng.normal(0.5, 0.08, 4)
        low, high = strata_t_interval([a, b])
        hits.append(low <= TRUE_MEAN <= high)
    assert 0.925 <= np.mean(hits) <= 0.98, np.mean(hits)


def test_t_interval_by_hand():
    """Values 1, 2, 3: mean 2, s = 1, t_{0.975, 2} = 4.3027; half-width 4.3027 / sqrt(3) = 2.4841."""
    low, high = t_interval([1.0, 2.0, 3.0])
    assert abs(low - (2 - 2.4841)) < 1e-3 and abs(high - (2 + 2.4841)) < 1e-3
    assert np.allclose(strata_t_interval([[1.0, 2.0, 3.0]]), (low, high))
    assert strata_t_interval([[1.0, 1.0], [3.0, 3.0]]) == (2.0, 2.0)
