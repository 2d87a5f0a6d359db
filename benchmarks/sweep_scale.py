"""How raylab's own cost grows with the number of trials: raylab's sweep against plain Ray Tune
on the same trivial trials, at 100 and 1,000 trials (and 5,000 with ``--full``), loggers off
and on, in one local Ray.

Each trial imports torch and reports three results, the last with a small checkpoint (plain
Tune: a bare function trainable saving a state dict; raylab: the ``toy`` workload cut to three SGD steps through ``raylab.launch.sweep.run`` with the
console progress line on, as the CLI runs it, and every raylab callback: config writer, disk-full
watch, gauges, summary). Both reuse actors between trials and run one trial per CPU. Loggers off:
Tune without its JSON/CSV/TensorBoard logger callbacks (``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS``)
and raylab without ``--logger``; on: Tune's default loggers, and raylab with ``--logger
tensorboard`` (which stands in for Tune's TensorBoard logger). Prints, per size and logger
setting: wall time per trial, results per second, the ratio raylab / plain Tune (goal: at most
1.10x at 1,000 trials), the driver's RSS over the sweep (sampled every 0.5 s: start, peak, end;
goal: growth under 1 GB across 5,000 trials), and the time of ``summary.csv`` (the end-of-sweep
rows from the finished run folder) and of the report (``raylab.report.write_report``) on the
finished run (goal: both under 30 s at 5,000 trials).

    python benchmarks/sweep_scale.py            # 100 and 1,000 trials, loggers off and on
    python benchmarks/sweep_scale.py --full     # and 5,000
    python benchmarks/sweep_scale.py --smoke    # 20 trials, loggers off: about a minute
    python benchmarks/sweep_scale.py --sizes 200 --loggers off
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import threading
import time

REPORTS = 3


def plain_trial(config):
    """Three reports, the last with a checkpoint of a small state dict, as the toy trial does."""
    import tempfile

    import torch  # the same import a raylab trial pays
    from ray import tune

    model = torch.nn.Linear(8, 1, bias=False)
    for step in range(1, REPORTS + 1):
        metrics = {"loss": float(torch.tensor(1.0 / (step + config["x"])))}
        if step < REPORTS:
            tune.report(metrics)
            continue
        with tempfile.TemporaryDirectory() as folder:
            torch.save({"model": model.state_dict(), "step": step}, f"{folder}/state.pt")
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


class RssSampler:
    """The driver's resident memory, sampled in a thread every ``every_s`` seconds."""

    def __init__(self, every_s: float = 0.5):
        import psutil

        self.process, self.every_s, self.samples = psutil.Process(), every_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.process.memory_info().rss)
            self._stop.wait(self.every_s)

    def __enter__(self):
        self.samples.append(self.process.memory_info().rss)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.samples.append(self.process.memory_info().rss)

    def text(self) -> str:
        mb = [s / 2**20 for s in self.samples]
        return f"RSS start {mb[0]:.0f} MB, peak {max(mb):.0f} MB, end {mb[-1]:.0f} MB (growth {mb[-1] - mb[0]:+.0f} MB)"


def run_plain(trials: int, storage: str, loggers: bool) -> tuple[float, RssSampler]:
    from ray import tune

    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "0" if loggers else "1"
    try:
        with RssSampler() as rss:
            start = time.perf_counter()
            tune.Tuner(
                plain_trial,
                param_space={"x": tune.randint(0, 1000)},
                tune_config=tune.TuneConfig(num_samples=trials, reuse_actors=True),
                run_config=tune.RunConfig(
                    storage_path=storage, verbose=0, checkpoint_config=tune.CheckpointConfig(num_to_keep=2)
                ),
            ).fit()
            wall = time.perf_counter() - start
    finally:
        os.environ.pop("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", None)
    return wall, rss


def raylab_experiment(trials: int):
    from raylab import experiment as experiments

    return experiments.load(
        "toy",
        [
            f"config.steps={REPORTS}",
            "config.report_every=1",
            "search.seed={randint: [0, 1000]}",
            "search.lr=[0.05]",
            f"num_samples={trials}",
            "scheduler.type=fifo",
            "checkpoint.every=1000000",
        ],
    )


def run_raylab(trials: int, storage: str, loggers: bool):
    from raylab.experiment import new_run_name
    from raylab.launch import sweep
    from raylab.run_folder import RunFolder

    experiment = raylab_experiment(trials)
    run = RunFolder.under(storage, new_run_name(experiment))
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull), contextlib.redirect_stdout(devnull):
        with RssSampler() as rss:
            start = time.perf_counter()
            done = sweep.run(experiment, run, verbose=0, progress=True, loggers=["tensorboard"] if loggers else [])
            wall = time.perf_counter() - start
    return wall, rss, experiment, run, done


def summary_seconds(experiment, run, done) -> float:
    """``summary.csv`` of the finished sweep, as ``python -m raylab.tune`` writes it: the
    end-of-sweep rows from Tune's results and the run folder, then the CSV."""
    from raylab import workloads
    from raylab.launch import summary, sweep

    start = time.perf_counter()
    rows = summary.rows(
        done.results,
        experiment.metric,
        experiment.mode,
        list(experiment.search),
        ended=sweep.ended_trials(run, done.results),
        reported=workloads.get(experiment.workload).metrics,
    )
    run.write_text("summary.csv", summary.to_csv(rows))
    return time.perf_counter() - start


def report_seconds(run) -> float:
    from raylab import report

    start = time.perf_counter()
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        report.write_report(run.location)
    return time.perf_counter() - start


def finished_run(trials: int, storage: str):
    """A finished run folder of ``trials`` toy trials written directly, without Ray: the
    experiment (``Experiment.write_to``), and per trial its params, three rows as the toy reports
    them, its full config and its ended marker (what the report reads)."""
    import random
    import uuid

    from raylab.experiment import new_run_name
    from raylab.launch.config_writer import resolve
    from raylab.run_folder import RunFolder

    experiment = raylab_experiment(trials)
    run = RunFolder.under(storage, new_run_name(experiment))
    experiment.write_to(run)
    rng = random.Random(0)
    for index in range(trials):
        trial_id = uuid.uuid4().hex[:8]
        params = {**experiment.config, "lr": 0.05, "seed": rng.randrange(1000)}
        folder = run.trial(f"toy_{trial_id}_{index:05d}_lr=0.05,seed={params['seed']}")
        folder.write_params(params)
        folder.write_config(resolve(experiment, params))
        mse = rng.uniform(0.5, 2.0)
        folder.write_rows(
            [
                {
                    "train/loss": mse * (1.1 - 0.1 * step),
                    "eval/mse": mse * (1.05 - 0.05 * step),
                    "train/step": step,
                    "training_iteration": step,
                    "time_total_s": 0.01 * step,
                    "trial_id": trial_id,
                    "done": step == REPORTS,
                }
                for step in range(1, REPORTS + 1)
            ]
        )
        run.mark_ended(trial_id)
    run.mark_finished(trials)
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="also 5,000 trials")
    parser.add_argument("--smoke", action="store_true", help="20 trials, loggers off (about a minute)")
    parser.add_argument("--sizes", type=int, nargs="+", help="trial counts (default 100 1000)")
    parser.add_argument("--loggers", choices=("off", "on", "both"), default="both")
    parser.add_argument("--no-report", action="store_true", help="skip the report's timing")
    parser.add_argument(
        "--report-only",
        type=int,
        metavar="N",
        help="only the report's time on a finished run of N trials written without Ray",
    )
    args = parser.parse_args(argv)
    if args.report_only:
        with tempfile.TemporaryDirectory() as storage:
            start = time.perf_counter()
            run = finished_run(args.report_only, storage)
            written = time.perf_counter() - start
            print(
                f"report of a finished run of {args.report_only} trials (written in {written:.0f} s): "
                f"{report_seconds(run):.1f} s (goal at 5,000 trials: < 30 s)"
            )
        return 0
    sizes = args.sizes or ([20] if args.smoke else [100, 1000] + ([5000] if args.full else []))
    settings = {"off": [False], "on": [True], "both": [False, True]}["off" if args.smoke else args.loggers]

    import ray

    ray.init(include_dashboard=False, logging_level=logging.ERROR)
    cpus = int(ray.cluster_resources()["CPU"])
    print(f"sweep_scale: trivial trials ({REPORTS} results each), one per CPU, {cpus} CPUs")
    with tempfile.TemporaryDirectory() as storage:
        run_plain(2, storage, False)  # warm the worker processes and their imports
        for trials in sizes:
            for loggers in settings:
                label = f"{trials} trials, loggers {'on' if loggers else 'off'}"
                plain_s, plain_rss = run_plain(trials, storage, loggers)
                raylab_s, raylab_rss, experiment, run, done = run_raylab(trials, storage, loggers)
                results = trials * REPORTS
                print(f"{label}:")
                print(
                    f"  plain Tune: {plain_s:7.1f} s  {plain_s / trials * 1000:6.1f} ms/trial  "
                    f"{results / plain_s:6.1f} results/s  {plain_rss.text()}"
                )
                print(
                    f"  raylab    : {raylab_s:7.1f} s  {raylab_s / trials * 1000:6.1f} ms/trial  "
                    f"{results / raylab_s:6.1f} results/s  {raylab_rss.text()}"
                )
                print(f"  ratio raylab / plain Tune: {raylab_s / plain_s:.2f}x (goal at 1,000 trials: <= 1.10x)")
                line = f"  summary.csv from the finished run: {summary_seconds(experiment, run, done):.1f} s"
                if not args.no_report:
                    line += f"; report: {report_seconds(run):.1f} s"
                print(line + " (goal at 5,000 trials: each < 30 s)")
                sys.stdout.flush()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
