"""What a user watches while a sweep runs: the console's line per trial update, with the metric
the sweep optimizes, and each trial's gauges in the Ray dashboard.

The per-trial time series for the Ray dashboard's Metrics view (``ray.util.metrics`` gauges).

Set by the process that reports a trial's rows (the Tune trial, or Ray Train's rank 0):

| gauge (Prometheus name) | tags | value |
| --- | --- | --- |
| ``raylab_trial_reports_per_s`` (``ray_raylab_trial_reports_per_s``) | trial, experiment | reports per second since the previous report |
| ``raylab_trial_metric`` (``ray_raylab_trial_metric``) | trial, experiment, metric | the experiment's metric, every ``*loss*`` metric and every ``*per_s`` throughput (steps/s, images/s) |
| ``raylab_trial_checkpoint_seconds`` (``ray_raylab_trial_checkpoint_seconds``) | trial, experiment | seconds to write and hand over the last checkpoint |

Ray exports them in Prometheus text on each node's metrics port; ``docs/monitoring.md`` shows how
to see them in the dashboard.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from typing import Any, Mapping

from raylab.experiment import Experiment


def result_line(trial_id: str, result: dict[str, Any], experiment: Experiment, best: float | None) -> str:
    """``toy_1a2b3 iter 4  train/step=80  eval/mse=0.0123 (best 0.0101)``."""
    parts = [f"{trial_id} iter {result.get('training_iteration', '?')}"]
    for key in experiment.stop:
        if key in result:
            parts.append(f"{key}={_number(result[key])}/{_number(experiment.stop[key])}")
    value = result.get(experiment.metric)
    if isinstance(value, (int, float)):
        parts.append(f"{experiment.metric}={_number(value)}"
                     + (f" ({experiment.mode} so far {_number(best)})" if best is not None else ""))
    return "  ".join(parts)


def better(mode: str, value: Any, best: float | None) -> float | None:
    """The best finite value of the metric so far, with ``value`` counted."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return best
    if best is None:
        return float(value)
    return max(best, value) if mode == "max" else min(best, value)


def status_line(statuses: list[str], elapsed_s: float) -> str:
    """``3 done, 2 running, 5 pending; ETA 4 min`` from the trials' Tune statuses.

    The ETA assumes the remaining trials take as long, at the rate so far, as the finished
    ones did: ``elapsed / done x (total - done)``; none finished yet gives no ETA.
    """
    done = sum(s in ("TERMINATED", "ERROR") for s in statuses)
    running = sum(s == "RUNNING" for s in statuses)
    pending = len(statuses) - done - running
    text = f"{done} done, {running} running, {pending} pending"
    if done and done < len(statuses):
        return text + f"; ETA {_duration(elapsed_s / done * (len(statuses) - done))}"
    return text + ("" if done else "; ETA once a trial has finished")


def error_line(trial_id: str, error_text: str | None, error_file: str | None) -> str:
    """``toy_1 failed: RuntimeError: boom (error.txt: PATH)``: the exception's last line."""
    lines = [line.strip() for line in (error_text or "").splitlines() if line.strip()]
    return (f"{trial_id} failed: {lines[-1] if lines else 'no error message'}"
            + (f" (error.txt: {error_file})" if error_file else ""))


def callback(experiment: Experiment, run_path: str | None = None, stream=None,
             status_every_s: float = 60.0, clock=time.monotonic):
    """A Tune callback that prints one line per trial result, start, end, error and restart,
    and a status line with the trial counts and an ETA at least every ``status_every_s``.

    The clock starts when the sweep (or its resumption) starts; an error line names the
    trial's ``error.txt`` in the run folder ``run_path``."""
    from ray import tune

    class ProgressLines(tune.Callback):
        def __init__(self):
            self.best: dict[str, float | None] = {}
            self.started = clock()
            self.last_status = self.started

        def setup(self, **info):  # each fit(), a resumed one too: its clock starts again
            self.started = self.last_status = clock()

        def _print(self, text: str) -> None:
            elapsed = clock() - self.started
            print(f"[{elapsed:6.0f}s] {text}", file=stream or sys.stdout, flush=True)

        def on_step_end(self, iteration, trials, **info):
            if clock() - self.last_status >= status_every_s:
                self.last_status = clock()
                self._print(status_line([t.status for t in trials], clock() - self.started))

        def on_trial_start(self, iteration, trials, trial, **info):
            self._print(f"{trial.trial_id} started")

        def on_trial_result(self, iteration, trials, trial, result, **info):
            best = better(experiment.mode, result.get(experiment.metric), self.best.get(trial.trial_id))
            self.best[trial.trial_id] = best
            self._print(result_line(trial.trial_id, result, experiment, best))

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._print(f"{trial.trial_id} finished")

        def on_trial_recover(self, iteration, trials, trial, **info):
            limit = experiment.failure.max_failures
            self._print(_error_line(trial, run_path) + f"; restarting ({trial.num_failures} of "
                        f"{limit if limit >= 0 else 'unlimited'})")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._print(_error_line(trial, run_path))

    return ProgressLines()


def _error_line(trial, run_path: str | None) -> str:
    """The failure Tune has just appended to the trial's error.txt on this machine (the copy in
    the run folder is synced later), named by its path in the run folder."""
    from raylab import storage

    try:
        with open(trial.error_file) as f:
            text = f.read()
    except (OSError, TypeError):
        text = None
    where = trial.error_file
    if run_path and trial.local_path:
        where = storage.join(run_path, storage.name_of(trial.local_path), "error.txt")
    return error_line(trial.trial_id, text, where)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _number(value: Any) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    if isinstance(value, float):
        return f"{int(value)}"
    return str(value)


# ------------------------------------------------------------------------ dashboard gauges




TAGS = ("trial", "experiment")


@functools.cache
def _gauges():
    from ray.util.metrics import Gauge

    return {
        "rate": Gauge("raylab_trial_reports_per_s", "Reports per second of a trial", tag_keys=TAGS),
        "metric": Gauge("raylab_trial_metric", "A trial's loss, throughput and optimized metric",
                        tag_keys=(*TAGS, "metric")),
        "checkpoint": Gauge("raylab_trial_checkpoint_seconds",
                            "Seconds to write and hand over a trial's last checkpoint", tag_keys=TAGS),
    }


def watched(name: str, experiment_metric: str) -> bool:
    """Whether metric ``name`` becomes a time series: the optimized one, losses, throughputs."""
    return name == experiment_metric or "loss" in name or name.endswith("per_s")


class TrialGauges:
    """The gauges of one trial, tagged with its id and experiment."""

    def __init__(self, trial: str, experiment: str, metric: str):
        self.tags = {"trial": trial, "experiment": experiment}
        self.metric = metric
        self.last = time.monotonic()

    def report(self, metrics: Mapping[str, Any]) -> None:
        gauges = _gauges()
        now = time.monotonic()
        if now > self.last:
            gauges["rate"].set(1.0 / (now - self.last), tags=self.tags)
        self.last = now
        for name, value in metrics.items():
            if (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and math.isfinite(value) and watched(name, self.metric)):
                gauges["metric"].set(float(value), tags={**self.tags, "metric": name})

    def checkpoint(self, seconds: float) -> None:
        _gauges()["checkpoint"].set(seconds, tags=self.tags)
