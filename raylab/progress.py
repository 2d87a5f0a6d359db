"""The sweep's console output: one line per trial update, with the metric the sweep optimizes."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

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


def callback(experiment: Experiment, stream=None):
    """A Tune callback that prints one line per trial result, start, end and error."""
    from ray import tune

    class ProgressLines(tune.Callback):
        def __init__(self):
            self.best: dict[str, float | None] = {}
            self.started = time.monotonic()

        def _print(self, text: str) -> None:
            elapsed = time.monotonic() - self.started
            print(f"[{elapsed:6.0f}s] {text}", file=stream or sys.stdout, flush=True)

        def on_trial_start(self, iteration, trials, trial, **info):
            self._print(f"{trial.trial_id} started")

        def on_trial_result(self, iteration, trials, trial, result, **info):
            best = better(experiment.mode, result.get(experiment.metric), self.best.get(trial.trial_id))
            self.best[trial.trial_id] = best
            self._print(result_line(trial.trial_id, result, experiment, best))

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._print(f"{trial.trial_id} finished")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._print(f"{trial.trial_id} failed (its error.txt says why)")

    return ProgressLines()


def _number(value: Any) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    if isinstance(value, float):
        return f"{int(value)}"
    return str(value)
