"""The per-trial time series for the Ray dashboard's Metrics view (``ray.util.metrics`` gauges).

Set by the process that reports a trial's rows (the Tune trial, or the driver of a Ray Train
trial, from every rank's reduced row):

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
import time
from typing import Any, Mapping

TAGS = ("trial", "experiment")


@functools.cache
def _gauges():
    from ray.util.metrics import Gauge

    return {
        "rate": Gauge("raylab_trial_reports_per_s", "Reports per second of a trial", tag_keys=TAGS),
        "metric": Gauge(
            "raylab_trial_metric", "A trial's loss, throughput and optimized metric", tag_keys=(*TAGS, "metric")
        ),
        "checkpoint": Gauge(
            "raylab_trial_checkpoint_seconds", "Seconds to write and hand over a trial's last checkpoint", tag_keys=TAGS
        ),
    }


def tag(value: str) -> str:
    """A tag value Ray's metrics take: ASCII, with anything else percent-encoded as UTF-8
    (``expé_α`` -> ``exp%C3%A9_%CE%B1``; Ray's metrics layer refuses other characters with a
    ``UnicodeEncodeError``). Only the tag is escaped: the run and its folders keep their names."""
    from urllib.parse import quote

    return value if value.isascii() else quote(value, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")


def watched(name: str, experiment_metric: str) -> bool:
    """Whether metric ``name`` becomes a time series: the optimized one, losses, throughputs."""
    return name == experiment_metric or "loss" in name or name.endswith("per_s")


class TrialGauges:
    """The gauges of one trial, tagged with its id and experiment."""

    def __init__(self, trial: str, experiment: str, metric: str):
        self.tags = {"trial": tag(trial), "experiment": tag(experiment)}
        self.metric = metric
        self.last = time.monotonic()

    def report(self, metrics: Mapping[str, Any]) -> None:
        gauges = _gauges()
        now = time.monotonic()
        if now > self.last:
            gauges["rate"].set(1.0 / (now - self.last), tags=self.tags)
        self.last = now
        for name, value in metrics.items():
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                and watched(name, self.metric)
            ):
                gauges["metric"].set(float(value), tags={**self.tags, "metric": tag(name)})

    def checkpoint(self, seconds: float) -> None:
        _gauges()["checkpoint"].set(seconds, tags=self.tags)
