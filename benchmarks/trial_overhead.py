"""Fixed cost per trial: raylab's sweep against plain Ray Tune, side by side in one Ray.

All run the same number of trivial single-CPU trials that report three times: plain Tune runs
a bare function trainable (with Tune's defaults, and again reusing actors between trials, as
raylab does); raylab runs the `toy` workload cut to three SGD steps through
`raylab.sweep.sweep` (config validation, the session API, two checkpoints through the raylab
helper). The difference is raylab's fixed cost per trial. Prints seconds for each and the
ratios (target: raylab <= 1.5x plain Tune).

Then the Ray Train path's fixed cost next to the Tune path's, as a user meets it: the whole
``python -m raylab.tune toy --smoke`` process (Ray start included, 2 trials), once as is
(Tune function trainables) and once with ``resources.workers=2 resources.cpus_per_worker=0.5``
(each trial a Tune function driving a two-worker Ray Train run, the same CPUs per trial).
Target: the Train path at most 2x the Tune path.

    python benchmarks/trial_overhead.py [--trials 8] [--repeats 2] [--cli-repeats 2]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
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


def run_cli(storage: str, *overrides: str) -> float:
    """Seconds of one whole ``python -m raylab.tune toy --smoke`` process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--quiet",
                    "--storage", storage, *overrides], check=True, capture_output=True)
    return time.perf_counter() - start


def train_path_side_by_side(repeats: int) -> None:
    tune_path, train_path = [], []
    with tempfile.TemporaryDirectory() as storage:
        for _ in range(repeats):
            tune_path.append(run_cli(storage))
            train_path.append(run_cli(storage, "resources.workers=2", "resources.cpus_per_worker=0.5"))
    t, r = statistics.median(tune_path), statistics.median(train_path)
    print(f"python -m raylab.tune toy --smoke (2 trials, whole process), median of {repeats}:")
    print(f"  Tune path (function trainables)              : {t:6.2f} s")
    print(f"  Ray Train path (2 workers x 0.5 CPU a trial) : {r:6.2f} s")
    print(f"  ratio Train path / Tune path                 : {r / t:6.2f}x  (target <= 2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cli-repeats", type=int, default=2)
    parser.add_argument("--only-train-path", action="store_true", help="skip the plain Tune part")
    args = parser.parse_args()
    if args.only_train_path:
        train_path_side_by_side(args.cli_repeats)
        return
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
    ray.shutdown()
    train_path_side_by_side(args.cli_repeats)


if __name__ == "__main__":
    main()
