"""Fixtures shared by every test: one Ray instance per test session, and sweep/trial runners."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import pytest

from raylab import experiment as experiments
from raylab import launch
from raylab import train as raylab_train

os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray (2 CPUs, no dashboard) shared by all tests that need Ray."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


@pytest.fixture
def smoke_sweep(ray_session, tmp_path):
    """``smoke_sweep(name, *overrides)``: run an experiment's smoke sweep through Ray Tune.

    Returns ``(result_grid, run_path, experiment)``; results go under ``tmp_path``.
    """

    def run(name: str, *overrides: str, smoke: bool = True, resume: bool = False, run_name=None):
        experiment = experiments.load(name, list(overrides), smoke=smoke)
        return launch.sweep(
            experiment, storage=str(tmp_path / "results"), name=run_name, resume=resume, verbose=0
        )

    return run


@pytest.fixture
def local_trial(tmp_path):
    """``local_trial(name, *overrides, trial_dir=None, stop=None)``: one smoke trial in-process.

    Runs the train loop as ``python -m raylab.train --smoke`` would (search fields at their
    first value), in ``trial_dir`` (default: a fresh folder under ``tmp_path``). Returns the
    reported rows. ``stop`` adds stop criteria, for interrupting a trial to test resume.
    """

    def run(name: str, *overrides: str, trial_dir: Path | None = None, stop: dict | None = None):
        extra = [f"stop.{k}={v}" for k, v in (stop or {}).items()]
        experiment = experiments.load(name, [*overrides, *extra], smoke=True)
        config, _ = raylab_train.single_config(experiment)
        return raylab_train.run_local(
            experiment, trial_dir or tmp_path / f"trial-{name}", config, verbose=False
        )

    return run


def assert_finite_metrics(row: dict, names) -> None:
    """Every name in ``names`` is in ``row`` and is a finite number (or a list of them)."""
    for name in names:
        assert name in row, f"metric {name} was not reported; got {sorted(row)}"
        values = row[name] if isinstance(row[name], list) else [row[name]]
        for value in values:
            assert isinstance(value, (int, float)) and math.isfinite(value), f"{name} = {row[name]}"
