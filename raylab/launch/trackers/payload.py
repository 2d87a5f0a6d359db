"""What every tracker (MLflow, W&B, TensorBoard) receives about a trial: pure functions.

- ``params``: the trial's resolved Config, every field with the workload's defaults filled in
  (``dataclasses.asdict``), nested fields flattened with dots (``model.width``); the variant's
  fields are Config fields like any other, so they arrive flat too.
- ``provenance_fields``: the run's provenance (``raylab.provenance``, saved in the run folder's
  ``experiment.yaml``) as flat ``raylab.*`` keys: git commit and dirty flag, command line,
  package versions, host.
- ``step_key``: the workload's own counter the trackers use as their step (x-axis).
- ``metrics``: a result's numeric values, nested keys joined with ``/``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from raylab.experiment import TUNE_COUNTERS, Experiment

TRAINING_ITERATION = "training_iteration"


def flatten(values: Mapping[str, Any], sep: str = ".", prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (with ``sep``); other values unchanged."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, sep, name))
        else:
            out[name] = value
    return out


def params(resolved_config: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's resolved Config (``raylab.launch.config_writer.resolve``) flat, dotted keys."""
    return flatten(resolved_config)


def step_key(experiment: Experiment) -> str:
    """The counter trackers step by: the scheduler's ``time_attr`` when the experiment names
    one, else its first ``stop`` key that the workload reports (``env/steps``, ``train/epoch``),
    else Tune's ``training_iteration``. Tune's time counters (seconds) are not steps."""
    if experiment.scheduler.time_attr not in TUNE_COUNTERS:
        return experiment.scheduler.time_attr
    for key in experiment.stop:
        if key not in TUNE_COUNTERS:
            return key
    return TRAINING_ITERATION


def step_of(result: Mapping[str, Any], key: str, last: int | None) -> int:
    """The integer step of ``result``: its ``key`` value, else the ``last`` one seen (a row
    without the counter, e.g. an evaluation-only report), else its ``training_iteration``."""
    value = result.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return int(value)
    if last is not None:
        return last
    return int(result.get(TRAINING_ITERATION) or 0)


def metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The numeric values of a Tune result (bools and the ``config`` copy left out), nested
    keys joined with ``/``."""
    flat = flatten({k: v for k, v in result.items() if k != "config"}, sep="/")
    return {
        key: float(value)
        for key, value in flat.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def provenance_fields(saved: Mapping[str, Any] | None) -> dict[str, Any]:
    """A run's saved provenance as flat ``raylab.*`` keys with scalar values: ``raylab.git.commit``,
    ``raylab.git.dirty``, ``raylab.command_line``, ``raylab.versions.<package>``, ``raylab.host``,
    ``raylab.python``, ``raylab.started``, and the user's ``raylab.notes`` and ``raylab.tags``
    (``--notes``, ``--tag``: the tags comma-separated). Empty values are left out."""
    if not saved:
        return {}
    keep = {key: saved.get(key) for key in ("git", "command_line", "versions", "host", "python", "started", "notes")}
    keep["tags"] = ", ".join(saved.get("tags") or [])
    return {key: value for key, value in flatten(keep, prefix="raylab").items() if value not in (None, "", {})}


def notes_and_tags(saved: Mapping[str, Any] | None) -> tuple[str, list[str]]:
    """The user's ``--notes`` and ``--tag`` values of a run's saved provenance."""
    saved = saved or {}
    return str(saved.get("notes") or ""), [str(tag) for tag in saved.get("tags") or []]


def scalar(value: Any) -> bool | int | float | str:
    """A value as a tracker's scalar parameter: numbers, bools and strings as they are, anything
    else (lists, None) as its text."""
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
