"""The report's view of a run folder: the experiment, its trials (``RunFolder.read_trials``),
the swept keys, and the grid points no trial exists for yet; and how the report labels values.

The run folder itself (what ``python -m raylab.tune`` or ``python -m raylab.train`` writes, local
or on a URI) is read by ``raylab.run_folder``; only JSON and YAML are read: nothing is unpickled.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raylab import yaml_io
from raylab.errors import UserError
from raylab.report.values import format_value
from raylab.run_folder import EXPERIMENT_FILE, PARAMS_FILE, RESULT_FILE, TRAIN_TRIAL, RunFolder, Trial, newest_run

TUNE_COUNTERS = ("training_iteration", "time_total_s")


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
    experiment = {}
    if files.kind(EXPERIMENT_FILE) == "file":
        experiment = yaml_io.loads(files.read_text(EXPERIMENT_FILE), files.join(EXPERIMENT_FILE)) or {}
        if not isinstance(experiment, dict):
            raise UserError(f"{path}/{EXPERIMENT_FILE}: expected a mapping of experiment keys")
    trials = files.read_trials()
    if not experiment and not trials:
        raise UserError(
            f"{path}: not a run folder (no {EXPERIMENT_FILE} and no trial folders with {PARAMS_FILE} or {RESULT_FILE})"
        )
    search = experiment.get("search") or {}
    swept = _swept_keys(search) or _varying_keys(trials)
    run = Run(path=files.location, experiment=experiment, trials=trials, swept=swept)
    single = [t.name for t in trials] == [TRAIN_TRIAL]  # python -m raylab.train: no search
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


def _varying_keys(trials: list[Trial]) -> list[str]:
    keys = sorted({k for t in trials for k in t.config})
    return [k for k in keys if len({_hashable(t.config.get(k)) for t in trials}) > 1]


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
        point = tuple(_hashable(t.config.get(k)) for k in keys)
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
