"""Does model-based search pay here? Optuna's TPE (with and without ASHA) against random search,
tuning the same real workload at small scale over several searcher seeds.

The workload: ``fair_adv_digits_tpe``'s smoke setting (TRADES, a small CNN, two epochs) on
scikit-learn's real 8x8 digits (1,797; cheap enough for 90 trials on two busy cores) at eps 0.1,
so that robust accuracy is not zero after two epochs; searched: lr, weight decay and the TRADES
beta over the experiment's ranges. The metric: ``val/robust_acc`` (max), each trial's best report. Three arms, each a sweep of
``--trials`` trials (two at a time) per searcher seed: ``random`` (Optuna's random sampler),
``tpe`` (TPE, ``n_startup_trials`` = half the budget), ``tpe+asha`` (the same under ASHA,
which stops a trial after its first epoch when it trails).

For each sweep: the number of trials started, and the wall time, until a trial came within
``--margin`` of the best value any sweep found (trials in the order they started; a sweep that
never got there counts as budget + 1 trials and its whole wall time, and the table says how
many did). Prints each arm's mean with a 95% interval (Student t over seeds) and the best value
each arm found.

    python benchmarks/search_compare.py [--seeds 5] [--trials 8] [--margin 0.02]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import math
import os
import statistics
import sys
import tempfile
import time

ARMS = {
    "random": ["search_alg.sampler=random"],
    "tpe": [],
    "tpe+asha": ["scheduler={type: asha, time_attr: train/epoch, max_t: 2, grace_period: 1, reduction_factor: 2}"],
}
METRIC = "val/robust_acc"


def arm_overrides(arm: str, seed: int, trials: int) -> list[str]:
    base = [
        "config.dataset=digits8x8",
        "config.eps=0.1",
        "config.step_size=0.05",
        f"metric={METRIC}",
        f"search_alg.seed={seed}",
        f"search_alg.n_startup_trials={max(1, trials // 2)}",
        "search_alg.max_concurrent=2",
        f"num_samples={trials}",
        "scheduler={type: fifo}",
    ]
    return base + ARMS[arm]


def run_sweep(arm: str, seed: int, trials: int, storage: str) -> list[tuple[float, float]]:
    """One sweep; each trial's (started, best metric, ended), in the order trials started, and
    the sweep's start time first."""
    from raylab import experiment as experiments
    from raylab.experiment import new_run_name
    from raylab.launch import sweep
    from raylab.run_folder import RunFolder

    experiment = experiments.load("fair_adv_digits_tpe", arm_overrides(arm, seed, trials), smoke=True)
    # one objective: the shipped experiment's second one (clean accuracy) is dropped here
    experiment = dataclasses.replace(experiment, search_alg=dataclasses.replace(experiment.search_alg, objectives={}))
    run = RunFolder.under(storage, new_run_name(experiment))
    start = time.time()
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull), contextlib.redirect_stderr(devnull):
        done = sweep.run(experiment, run, verbose=0)
    out = []
    for result in done.results:
        rows = result.metrics_dataframe
        if rows is None or METRIC not in rows:
            continue
        values = rows[METRIC].dropna()
        out.append((float(rows["timestamp"].min()), float(values.max()), float(rows["timestamp"].max())))
    out.sort()
    return start, out


def reach(
    start: float, trials: list[tuple[float, float, float]], target: float, budget: int
) -> tuple[int, float, bool]:
    """Trials started, and seconds, until one came within the margin (``target``)."""
    for index, (_, best, ended) in enumerate(trials, start=1):
        if best >= target:
            return index, ended - start, True
    return budget + 1, (max(t[2] for t in trials) - start) if trials else 0.0, False


def interval(values: list[float]) -> str:
    """Mean and 95% Student-t interval over seeds."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.1f}"
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return f"{mean:.1f} [{mean - half:.1f}, {mean + half:.1f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=8, help="trials per sweep (the budget)")
    parser.add_argument("--margin", type=float, default=0.02, help="within this much of the best (absolute)")
    args = parser.parse_args(argv)

    import ray

    ray.init(include_dashboard=False, logging_level=logging.ERROR)
    found: dict[str, list] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as storage:
        for seed in range(args.seeds):
            for arm in ARMS:
                found[arm].append(run_sweep(arm, seed, args.trials, storage))
                start, trials = found[arm][-1]
                best = max((t[1] for t in trials), default=float("nan"))
                print(
                    f"  seed {seed} {arm:9s}: {len(trials)} trials, best {METRIC} {best:.3f}, "
                    f"{trials[-1][2] - start:.0f} s; each trial (best, s from start): "
                    + " ".join(f"({t[1]:.3f}, {t[2] - start:.0f})" for t in trials)
                )
                sys.stdout.flush()
    ray.shutdown()
    best = max(t[1] for sweeps in found.values() for _, trials in sweeps for t in trials)
    target = best - args.margin
    print(
        f"\nfair_adv_digits_tpe --smoke on digits8x8 at eps 0.1: {args.trials} trials a sweep, {args.seeds} searcher seeds; "
        f"best {METRIC} by any sweep {best:.3f}; target: within {args.margin} ({target:.3f})"
    )
    print(f"| arm | trials to target (mean, 95% CI) | seconds to target | reached | best {METRIC} (mean) |")
    print("| --- | --- | --- | --- | --- |")
    for arm, sweeps in found.items():
        reached = [reach(start, trials, target, args.trials) for start, trials in sweeps]
        bests = [max(t[1] for t in trials) for _, trials in sweeps]
        print(
            f"| {arm} | {interval([r[0] for r in reached])} | {interval([r[1] for r in reached])} | "
            f"{sum(r[2] for r in reached)}/{len(reached)} | {statistics.fmean(bests):.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
