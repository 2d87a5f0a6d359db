"""What a user watches on the console while a sweep runs: a Tune callback printing one line per
trial update, with the metric the sweep optimizes, and a status line with counts and an ETA.
(The trials' time series in the Ray dashboard are ``raylab.launch.gauges``.)
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from raylab import search_space
from raylab.cluster.prices import failure_budget
from raylab.experiment import Experiment
from raylab.run_folder import ERROR_FILE, RunFolder, name_of

COLLAPSE_ABOVE = 50
"""Above this many trials the console prints one status line at a time, not a line per trial
update (errors still get their own line)."""

COLLAPSED_STATUS_EVERY_S = 15.0
"""How often the one status line of a collapsed console is printed (at most)."""


def trial_count(experiment: Experiment) -> int:
    """The sweep's trial count from its search space: grid size x ``num_samples``."""
    return search_space.grid_size(experiment.search) * experiment.num_samples


def result_line(trial_id: str, result: dict[str, Any], experiment: Experiment, best: float | None) -> str:
    """``toy_1a2b3 iter 4  train/step=80  eval/mse=0.0123 (best 0.0101)``."""
    parts = [f"{trial_id} iter {result.get('training_iteration', '?')}"]
    for key in experiment.stop:
        if key in result:
            parts.append(f"{key}={_number(result[key])}/{_number(experiment.stop[key])}")
    value = result.get(experiment.metric)
    if isinstance(value, (int, float)):
        parts.append(
            f"{experiment.metric}={_number(value)}"
            + (f" ({experiment.mode} so far {_number(best)})" if best is not None else "")
        )
    return "  ".join(parts)


def better(mode: str, value: Any, best: float | None) -> float | None:
    """The best finite value of the metric so far, with ``value`` counted."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return best
    if best is None:
        return float(value)
    return max(best, value) if mode == "max" else min(best, value)


def fraction(result: dict[str, Any], stop: dict[str, float]) -> float | None:
    """How far a trial is toward its ``stop`` criterion, 0 to 1 (the furthest of its keys):
    ``env/steps=500`` of 2000 is 0.25; None when the result carries no stop key."""
    shares = [
        min(1.0, max(0.0, result[key] / limit))
        for key, limit in stop.items()
        if isinstance(result.get(key), (int, float)) and limit > 0
    ]
    return max(shares) if shares else None


def status_line(
    statuses: list[str], elapsed_s: float, running: list[tuple[float, float]] = (), total: int | None = None
) -> str:
    """``3 done, 2 running, 5 pending; ETA 4 min`` from the trials' Tune statuses.

    ``total``: the sweep's trial count from its search space (``trial_count``); Tune creates
    trials lazily, so the trials it has made so far are not all (a trial not made yet counts as
    pending).

    ``running``: for each running trial that has reported progress toward the stop criterion,
    ``(now, at_start)``, the fractions (``fraction``) it has reached and had reached when this
    sweep (or its resumption) started. The work done since then, in trials, is
    ``W = done + sum(now - at_start)``, the work left ``L = total - done - sum(now)``, and at the
    rate so far the ETA is ``elapsed x L / W``: with no trial finished yet it comes from the
    running trials' progress alone (``elapsed / done x (total - done)`` once only finished
    trials count). No progress yet gives no ETA.
    """
    count = max(total or 0, len(statuses))
    done = sum(s in ("TERMINATED", "ERROR") for s in statuses)
    active = sum(s == "RUNNING" for s in statuses)
    pending = count - done - active
    text = f"{done} done, {active} running, {pending} pending" + (f" of {count}" if count > COLLAPSE_ABOVE else "")
    if done == count:
        return text
    work = done + sum(now - start for now, start in running)
    left = count - done - sum(now for now, _ in running)
    if work <= 0:
        return text + "; ETA once a trial reports progress toward its stop criterion or finishes"
    return text + f"; ETA {duration(elapsed_s * left / work)}"


def at_start(result: dict[str, Any], now: float) -> float:
    """A trial's fraction when this sweep started, from its first result here: 0 for a new
    trial; for one restored from a checkpoint, ``now`` scaled by the share of its iterations
    made before the restore (Tune's ``iterations_since_restore`` of ``training_iteration``)."""
    total = result.get("training_iteration")
    since = result.get("iterations_since_restore")
    if not isinstance(total, (int, float)) or not isinstance(since, (int, float)) or total <= 0:
        return 0.0
    return now * max(0.0, total - since) / total


def error_line(trial_id: str, error_text: str | None, error_file: str | None) -> str:
    """``toy_1 failed: RuntimeError: boom (error.txt: PATH)``: the exception's last line."""
    lines = [line.strip() for line in (error_text or "").splitlines() if line.strip()]
    return f"{trial_id} failed: {lines[-1] if lines else 'no error message'}" + (
        f" ({ERROR_FILE}: {error_file})" if error_file else ""
    )


def callback(
    experiment: Experiment, run_path: str | None = None, stream=None, status_every_s: float = 60.0, clock=time.monotonic
):
    """A Tune callback that prints one line per trial result, start, end, error and restart,
    and a status line with the trial counts and an ETA at least every ``status_every_s``.

    A sweep of more than ``COLLAPSE_ABOVE`` trials prints the status line alone (at most every
    ``COLLAPSED_STATUS_EVERY_S``) and the errors and restarts. The clock starts when the sweep
    (or its resumption) starts; an error line names the trial's error file in the run folder
    ``run_path``."""
    from ray import tune

    total = trial_count(experiment)
    collapsed = total > COLLAPSE_ABOVE
    if collapsed:
        status_every_s = min(status_every_s, COLLAPSED_STATUS_EVERY_S)

    class ProgressLines(tune.Callback):
        def __init__(self):
            self.best: dict[str, float | None] = {}
            # trial id -> (fraction of the stop criterion now, fraction when this sweep started)
            self.progress: dict[str, tuple[float, float]] = {}
            self.started = clock()
            self.last_status = self.started

        def setup(self, **info):  # each fit(), a resumed one too: its clock starts again
            self.started = self.last_status = clock()
            if collapsed:
                self._print(
                    f"{total} trials: one status line every {status_every_s:.0f} s instead of a line per trial "
                    "(errors still get theirs)"
                )

        def _trial_line(self, text: str) -> None:
            if not collapsed:
                self._print(text)

        def _print(self, text: str) -> None:
            elapsed = clock() - self.started
            print(f"[{elapsed:6.0f}s] {text}", file=stream or sys.stdout, flush=True)

        def on_step_end(self, iteration, trials, **info):
            if clock() - self.last_status >= status_every_s:
                self.last_status = clock()
                running = [
                    self.progress[t.trial_id]
                    for t in trials
                    if t.status == "RUNNING" and getattr(t, "trial_id", None) in self.progress
                ]
                self._print(status_line([t.status for t in trials], clock() - self.started, running, total))

        def on_trial_start(self, iteration, trials, trial, **info):
            self._trial_line(f"{trial.trial_id} started")

        def on_trial_result(self, iteration, trials, trial, result, **info):
            best = better(experiment.mode, result.get(experiment.metric), self.best.get(trial.trial_id))
            self.best[trial.trial_id] = best
            now = fraction(result, experiment.stop)
            if now is not None:
                self.progress[trial.trial_id] = (now, self.progress.get(trial.trial_id, (0, at_start(result, now)))[1])
            self._trial_line(result_line(trial.trial_id, result, experiment, best))

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._trial_line(f"{trial.trial_id} finished")

        def on_trial_recover(self, iteration, trials, trial, **info):
            limit = failure_budget(experiment)[0]
            self._print(
                _error_line(trial, run_path) + f"; restarting ({trial.num_failures} of "
                f"{limit if limit >= 0 else 'unlimited'})"
            )

        def on_trial_error(self, iteration, trials, trial, **info):
            self._print(_error_line(trial, run_path))

    return ProgressLines()


def _error_line(trial, run_path: str | None) -> str:
    """The failure Tune has just appended to the trial's error file on this machine (the copy in
    the run folder is synced later), named by its location in the run folder."""
    try:
        with open(trial.error_file) as f:
            text = f.read()
    except (OSError, TypeError):
        text = None
    where = trial.error_file
    if run_path and trial.local_path:
        where = RunFolder(run_path).trial(name_of(trial.local_path)).error_location
    return error_line(trial.trial_id, text, where)


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _number(value: Any) -> str:
    """A value for a progress line: ``-`` for NaN (a metric not measured yet, as seagram's
    attack metrics before its attack phase)."""
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    if isinstance(value, float):
        return f"{int(value)}"
    return str(value)
