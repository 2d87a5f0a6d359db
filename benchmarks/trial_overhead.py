"""Fixed cost per trial: raylab's sweep against plain Ray Tune, side by side in one Ray.

All run the same number of trivial single-CPU trials that report three times: plain Tune runs
a bare function trainable (with Tune's defaults, and again reusing actors between trials, as
raylab does); raylab runs the `toy` workload cut to three SGD steps through
`raylab.launch.sweep.run` (config validation, the session API, two checkpoints through the raylab
helper). The difference is raylab's fixed cost per trial. Prints seconds for each and the
ratios (target: raylab <= 1.5x plain Tune).

Then the Ray Train path's fixed cost next to the Tune path's, as a user meets it: the whole
``python -m raylab.tune toy --smoke`` process (Ray start included, 2 trials), once as is
(Tune function trainables) and once with ``resources.workers=2 resources.cpus_per_worker=0.5``
(each trial a Tune function driving a two-worker Ray Train run, the same CPUs per trial).
Target: the Train path at most 2x the Tune path. With ``--cpu-by-process`` it then runs each
path once more and prints the CPU seconds its new processes used, by process title (Ray names
its actors' processes ``ray::ClassName``): where the Train path's extra time goes when process
starts compete for few cores.

    python benchmarks/trial_overhead.py [--trials 8] [--repeats 2] [--cli-repeats 2] [--cpu-by-process]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ray
from ray import tune

from raylab import experiment as experiments
from raylab.experiment import new_run_name
from raylab.launch import sweep
from raylab.run_folder import RunFolder


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
        [
            "config.steps=3",
            "config.report_every=1",
            f"search.seed={list(range(trials))}",
            "search.lr=[0.05]",
            "num_samples=1",
            "scheduler.type=fifo",
        ],
    )
    sweep.run(experiment, RunFolder.under(storage, new_run_name(experiment)), verbose=0)
    return time.perf_counter() - start


def cli_command(storage: str, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--quiet", "--storage", storage, *overrides]


def run_cli(storage: str, *overrides: str) -> float:
    """Seconds of one whole ``python -m raylab.tune toy --smoke`` process."""
    start = time.perf_counter()
    subprocess.run(cli_command(storage, *overrides), check=True, capture_output=True)
    return time.perf_counter() - start


def cpu_by_process(command: list[str], poll_s: float = 0.2) -> dict[str, list[float]]:
    """CPU seconds (user + system) of each process started while ``command`` ran, by title.

    Sampled every ``poll_s``: a process that lives shorter than that may be missed, and the
    CPU a process uses after its last sample is not counted.
    """
    import psutil

    started = time.time()  # a process's start time is rounded: one second of slack below
    seen: dict[int, tuple[str, float]] = {}
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        for p in psutil.process_iter(["pid", "name", "cmdline", "cpu_times", "create_time"]):
            info = p.info
            if info["cpu_times"] is None or (info["create_time"] or 0) < started - 1.0:
                continue
            title = process_title(info["name"], info["cmdline"] or [])
            if info["pid"] in seen and not info["cmdline"]:  # exiting: its cmdline is gone
                title = seen[info["pid"]][0]
            seen[info["pid"]] = (title, info["cpu_times"].user + info["cpu_times"].system)
        time.sleep(poll_s)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed with exit code {proc.returncode}")
    by_title: dict[str, list[float]] = {}
    for title, cpu in seen.values():
        by_title.setdefault(title, []).append(cpu)
    return by_title


def process_title(name: str, cmdline: list[str]) -> str:
    """``ray::TrainController`` for an actor's process (whatever method it runs), else the command."""
    if cmdline and cmdline[0].startswith("ray::"):
        return cmdline[0].split()[0].split(".")[0]
    return " ".join(Path(c).name for c in cmdline[:3]) or name


def print_cpu_by_process(label: str, by_title: dict[str, list[float]], top: int = 12) -> None:
    total = sum(sum(v) for v in by_title.values())
    print(f"  {label}: {total:.1f} CPU s in {sum(map(len, by_title.values()))} new processes")
    for title, cpus in sorted(by_title.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"    {sum(cpus):6.1f} s  {len(cpus):2d} x {title[:60]}")


TRAIN_PATH = ("resources.workers=2", "resources.cpus_per_worker=0.5")


def train_path_side_by_side(repeats: int) -> None:
    tune_path, train_path = [], []
    with tempfile.TemporaryDirectory() as storage:
        for _ in range(repeats):
            tune_path.append(run_cli(storage))
            train_path.append(run_cli(storage, *TRAIN_PATH))
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
    parser.add_argument(
        "--cpu-by-process", action="store_true", help="then the CPU seconds of each path's processes, by process title"
    )
    args = parser.parse_args()
    if args.only_train_path:
        train_path_side_by_side(args.cli_repeats)
    else:
        tune_side_by_side(args)
    if args.cpu_by_process:
        print("CPU seconds by process, one whole process each (sampled every 0.2 s):")
        with tempfile.TemporaryDirectory() as storage:
            print_cpu_by_process("Tune path", cpu_by_process(cli_command(storage)))
            print_cpu_by_process("Ray Train path", cpu_by_process(cli_command(storage, *TRAIN_PATH)))


def tune_side_by_side(args: argparse.Namespace) -> None:
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
