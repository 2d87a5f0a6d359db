"""Fixed cost per trial: raylab's sweep against plain Ray Tune, side by side in one Ray.

All run the same number of trivial single-CPU trials that report three times: plain Tune runs
a bare function trainable (with Tune's defaults, and again reusing actors between trials, as
raylab does); raylab runs the `toy` workload cut to three SGD steps through
`raylab.sweep.sweep` (config validation, the session API, two checkpoints through the raylab
helper). The difference is raylab's fixed cost per trial. Prints seconds for each and the
ratios (target: raylab <= 1.5x plain Tune).

    python benchmarks/trial_overhead.py [--trials 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time

import ray
from ray import tune

from raylab import experiment as experiments
from raylab import sweep


def plain_trial(config):
    import torch  # the same import a raylab trial pays

    for step in range(3):
        tune.report({"loss": float(torch.tensor(1.0 / (step + 1 + config["x"])))})


def run_plain(trials: int, storage: str, reuse_actors: bool = False) -> float:
    start = time.perf_counter()
    tune.Tuner(
        plain_trial,
        param_space={"x": tune.grid_search(list(range(trials)))},
        tune_config=tune.TuneConfig(reuse_actors=reuse_actors),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    return time.perf_counter() - start


def run_raylab(trials: int, storage: str) -> float:
    start = time.perf_counter()
    experiment = experiments.load(
        "toy",
        ["config.steps=3", "config.report_every=1", f"search.seed={list(range(trials))}",
         "search.lr=[0.05]", "num_samples=1", "scheduler.type=fifo"],
    )
    sweep.sweep(experiment, storage=storage, verbose=0)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    ray.init(include_dashboard=False, logging_level=logging.ERROR)
    cpus = int(ray.cluster_resources()["CPU"])
    plain, reused, raylab = [], [], []
    with tempfile.TemporaryDirectory() as storage:
        run_plain(2, storage)  # warm up worker processes and imports for all three
        for _ in range(args.repeats):
            plain.append(run_plain(args.trials, storage))
            reused.append(run_plain(args.trials, storage, reuse_actors=True))
            raylab.append(run_raylab(args.trials, storage))
    p, q, r = (statistics.median(x) for x in (plain, reused, raylab))
    n = args.trials
    print(f"{n} trivial single-CPU trials on {cpus} CPUs, median of {args.repeats}:")
    print(f"  plain Ray Tune function trainable (defaults) : {p:6.2f} s  ({p / n:.2f} s/trial)")
    print(f"  plain Ray Tune, reuse_actors=True           : {q:6.2f} s  ({q / n:.2f} s/trial)")
    print(f"  raylab sweep (toy workload, reuses actors)   : {r:6.2f} s  ({r / n:.2f} s/trial)")
    print(f"  ratio raylab / plain Tune                    : {r / p:6.2f}x  (target <= 1.5x)")
    print(f"  ratio raylab / plain Tune with reused actors : {r / q:6.2f}x")


if __name__ == "__main__":
    main()
