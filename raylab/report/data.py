"""Reading a run folder for a report: the experiment, every trial's config, rows and status.

A run folder is what ``python -m raylab.tune`` (one folder per Tune trial) or
``python -m raylab.train`` (one ``trial/`` folder) writes: ``experiment.yaml``, and per trial
``params.json``, ``result.json`` (one JSON row per report), ``error.txt`` when it failed.
Local paths and URIs (``s3://``, ``gs://``, ``file://``) are read through pyarrow's filesystem
layer, the one Ray's storage uses. Only JSON and YAML are read: nothing is unpickled.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raylab import yaml_io
from raylab.errors import UserError
from raylab.run_folder import (
    ERROR_FILE,
    EXPERIMENT_FILE,
    PARAMS_FILE,
    RESULT_FILE,
    TRAIN_TRIAL,
    RunFolder,
    TrialFolder,
    newest_run,
    trial_status,
)

TUNE_COUNTERS = ("training_iteration", "time_total_s")


@dataclass
class Trial:
    """One trial of a run, as its folder shows it now."""

    name: str
    """The trial folder's name."""
    params: dict[str, Any]
    """The trial's config (``params.json``)."""
    rows: list[dict[str, Any]]
    """Its reports, oldest first (``result.json``)."""
    status: str
    """``raylab.run_folder.trial_status``: TERMINATED, ERROR, RUNNING, PENDING, PAUSED (a live
    sweep's, from Tune's state), STOPPED or NO RESULTS."""
    error: str = ""
    """The first line of ``error.txt`` (empty when there is none)."""

    def reported(self) -> set[str]:
        """Every metric name this trial reported at least once."""
        return {key for row in self.rows for key in row}


@dataclass
class Run:
    """A run folder, read."""

    path: str
    experiment: dict[str, Any]
    trials: list[Trial]
    swept: list[str]
    """Swept config keys: the experiment's ``search`` keys, else the keys that differ."""
    expected: int | None = None
    """Trials the search makes (grid size x num_samples), None when it cannot be known."""
    not_started: list[str] = field(default_factory=list)
    """Grid points (``key=value, ...``) that no trial folder exists for yet."""

    @property
    def name(self) -> str:
        return RunFolder(self.path).name  # a URI's ?query is not part of it


# ------------------------------------------------------------------------ finding runs


def find_run(target: str, storage: str = "results", train_runs: bool = False) -> str:
    """The run folder ``target`` names: a path or URI of one, or an experiment name (its newest
    run under ``storage``: ``raylab.run_folder.newest_run``; sweeps only, unless ``train_runs``
    lets a ``python -m raylab.train`` debug run be the newest too)."""
    folder = RunFolder(target)
    looks_like_path = folder.is_uri or "/" in target or target.startswith(".")
    if looks_like_path or Path(target).exists():
        kind = folder.kind()
        if kind == "missing":
            raise UserError(f"{target}: no such run folder")
        if kind != "dir":
            raise UserError(f"{target}: not a run folder (a file, not a folder)")
        return folder.location
    root = RunFolder(storage)
    if root.kind() != "dir":
        raise UserError(f"'{target}' is not a run folder, and --storage {storage} has no runs of it")
    newest = newest_run(root.location, target, train=None if train_runs else False)
    if newest is None and (debug := newest_run(root.location, target, train=True)) is not None:
        raise UserError(
            f"no sweep of experiment '{target}' under {root.location}; its newest python -m raylab.train run is "
            f"{debug.name}: add --train-runs to report it (or pass its folder, {debug.location})"
        )
    if newest is None:
        raise UserError(
            f"no run of experiment '{target}' under {root.location} (folders whose {EXPERIMENT_FILE} names it)"
        )
    return newest.location


# ------------------------------------------------------------------------ reading a run


def load_run(path: str) -> Run:
    """Read the run folder at ``path`` (local or URI); ``UserError`` if it is not one."""
    files = RunFolder(path)
    kind = files.kind()
    if kind == "missing":
        raise UserError(f"{path}: no such run folder")
    if kind != "dir":
        raise UserError(f"{path}: not a run folder (a file, not a folder)")
    entries = dict(files.listdir())
    experiment = {}
    if entries.get(EXPERIMENT_FILE) == "file":
        experiment = yaml_io.loads(files.read_text(EXPERIMENT_FILE), files.join(EXPERIMENT_FILE)) or {}
        if not isinstance(experiment, dict):
            raise UserError(f"{path}/{EXPERIMENT_FILE}: expected a mapping of experiment keys")
    states = _tune_states(files, entries)
    folders = files.trials()
    if not experiment and not folders and not states:
        raise UserError(
            f"{path}: not a run folder (no {EXPERIMENT_FILE} and no trial folders with {PARAMS_FILE} or {RESULT_FILE})"
        )
    ended = files.ended_trials()
    trials = [_load_trial(folder, states.pop(folder.name, None), ended) for folder in folders]
    for name, state in sorted(states.items()):  # known to Tune, no folder yet
        trials.append(
            Trial(
                name=name,
                params=state.get("params", {}),
                rows=[],
                status=trial_status(False, False, False, tune_status=state.get("status") or "PENDING"),
            )
        )
    search = experiment.get("search") or {}
    swept = _swept_keys(search) or _varying_keys(trials)
    run = Run(path=files.location, experiment=experiment, trials=trials, swept=swept)
    single = [f.name for f in folders] == [TRAIN_TRIAL] and not states  # python -m raylab.train: no search
    if search and not single:
        run.expected = _expected_trials(search, int(experiment.get("num_samples") or 1))
        run.not_started = _grid_points_without_trials(search, int(experiment.get("num_samples") or 1), trials)
    return run


def _swept_keys(search: dict) -> list[str]:
    """The search's keys, with a ``variant`` grid standing for the fields its groups set."""
    keys: dict[str, None] = {}  # each key once, in order
    for key, spec in search.items():
        if key == "variant" and "grid" in spec:
            keys.update(dict.fromkeys(k for group in spec["grid"] if isinstance(group, dict) for k in group))
        else:
            keys[key] = None
    return list(keys)


def _load_trial(trial: TrialFolder, state: dict | None, ended: frozenset[str] = frozenset()) -> Trial:
    params = trial.params()
    if not params and state:
        params = state.get("params", {})
    if isinstance(params.get("variant"), dict):  # a search.variant group: its fields are swept
        params = {**params, **params["variant"]}
    rows = trial.rows()
    for row in rows:
        row.pop("config", None)
    text = trial.error()
    error = "" if text is None else _error_line([line.strip() for line in text.splitlines() if line.strip()])
    last = rows[-1] if rows else {}
    status = trial_status(
        bool(rows),
        bool(last.get("done")),
        bool(error),
        last.get("trial_id") in ended,
        tune_status=(state or {}).get("status"),
    )
    return Trial(name=trial.name, params=params, rows=rows, status=status, error=error)


def _error_line(lines: list[str]) -> str:
    """The first line of error.txt; Ray's own wrapper lines skipped for the actual exception."""
    if not lines:
        return f"(empty {ERROR_FILE})"
    for line in lines:
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", line) and "ray::" not in line:
            return f"{lines[0]} ... {line}" if line != lines[0] else line
    return lines[0]


def _tune_states(files: RunFolder, entries: dict[str, str]) -> dict[str, dict]:
    """Trial statuses from Tune's newest ``experiment_state-*.json`` (read as JSON, not pickle)."""
    names = sorted(n for n, k in entries.items() if k == "file" and n.startswith("experiment_state-"))
    if not names:
        return {}
    try:
        data = json.loads(files.read_text(names[-1]))
    except (json.JSONDecodeError, OSError):
        return {}
    states = {}
    for entry in data.get("trial_data", []):
        try:
            info = json.loads(entry[0]) if isinstance(entry[0], str) else entry[0]
        except (json.JSONDecodeError, IndexError, TypeError):
            continue
        if isinstance(info, dict) and info.get("relative_logdir"):
            config = info.get("config") if isinstance(info.get("config"), dict) else {}
            states[info["relative_logdir"]] = {"status": info.get("status"), "params": config}
    return states


def _varying_keys(trials: list[Trial]) -> list[str]:
    keys = sorted({k for t in trials for k in t.params})
    return [k for k in keys if len({_hashable(t.params.get(k)) for t in trials}) > 1]


def _expected_trials(search: dict, num_samples: int) -> int:
    """Tune's trial count: every grid combination, ``num_samples`` times (random keys sampled).

    The same count as ``raylab.search_space.grid_size``, without importing Ray.
    """
    return math.prod(len(spec["grid"]) for spec in search.values() if "grid" in spec) * num_samples


def _grid_points_without_trials(search: dict, num_samples: int, trials: list[Trial]) -> list[str]:
    """Grid combinations with fewer known trials than ``num_samples`` (all-grid searches)."""
    if not all("grid" in spec for spec in search.values()):
        return []
    import itertools

    keys = list(search)
    seen: dict[tuple, int] = {}
    for t in trials:
        point = tuple(_hashable(t.params.get(k)) for k in keys)
        seen[point] = seen.get(point, 0) + 1
    missing = []
    for combo in itertools.product(*(search[k]["grid"] for k in keys)):
        point = tuple(_hashable(v) for v in combo)
        lacking = num_samples - seen.get(point, 0)
        if lacking > 0:
            label = ", ".join(f"{k}={format_value(v)}" for k, v in zip(keys, combo))
            missing.append(label + (f" (x{lacking})" if num_samples > 1 else ""))
    return missing


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def format_value(value: Any) -> str:
    """A config value as a short label."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "+".join(format_value(v) for v in value) or "[]"
    return str(value)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_vector(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(is_number(v) for v in value)


def finite(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)
