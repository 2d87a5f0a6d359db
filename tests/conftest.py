"""Fixtures shared by every test: one Ray instance per test session, sweep/trial runners, and
torch on one thread."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from pathlib import Path

import pytest

from raylab import experiment as experiments
from raylab import sweep
from raylab import train as raylab_train

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Loops that live in tests/ (faulty and failing loops) are imported by module path in Ray
# workers, whose working directory is not the repository's: they find it on PYTHONPATH.
REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray (2 CPUs) shared by all tests that need Ray.

    Its dashboard process runs, as ``raylab.tune`` starts it for Ray Train trials: Ray Train's
    placement-group cleaner asks Ray's State API (served there) whether a run's controller is
    alive, and without it a Train run stopped from outside (PBT, ASHA, a stop criterion) keeps
    its CPUs until Ray shuts down.
    """
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1",
                 logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


@pytest.fixture
def smoke_sweep(ray_session, tmp_path):
    """``smoke_sweep(name, *overrides)``: run an experiment's smoke sweep through Ray Tune.

    Returns ``(result_grid, run_path, experiment)``; results go under ``tmp_path``.
    """

    def run(name: str, *overrides: str, smoke: bool = True, resume: bool = False, run_name=None):
        experiment = experiments.load(name, list(overrides), smoke=smoke)
        return sweep.sweep(
            experiment, storage=str(tmp_path / "results"), name=run_name, resume=resume, verbose=0
        )

    return run


@pytest.fixture(scope="session")
def shared_smoke_sweep(ray_session, tmp_path_factory):
    """``shared_smoke_sweep(name, *overrides)``: ``smoke_sweep``'s result for a sweep that several
    tests read and none changes, run once per test session (the first test that asks runs it).

    ``{shared}`` in an override is this session's folder of shared sweeps (a data folder there
    is shared too). Returns ``(result_grid, run_path, experiment)``.
    """
    root = tmp_path_factory.mktemp("shared_sweeps")
    done: dict[tuple[str, ...], tuple] = {}

    def run(name: str, *overrides: str):
        key = (name, *overrides)
        if key not in done:
            resolved = [o.replace("{shared}", str(root)) for o in overrides]
            experiment = experiments.load(name, resolved, smoke=True)
            done[key] = sweep.sweep(experiment, storage=str(root / "results"), verbose=0,
                                    name=f"{Path(name).stem}-{len(done)}")
        return done[key]

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


@contextlib.contextmanager
def torch_on_one_thread():
    """torch with one intra-op thread inside, its previous count restored after.

    Small models run fastest so, and stay steady on a busy two-core machine (Ray gives a
    one-CPU trial the same; two threads spin against other processes and run several times
    slower).
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def one_thread():
    """One torch thread for the test that asks for it."""
    with torch_on_one_thread():
        yield


@pytest.fixture(scope="module")
def one_thread_module():
    """One torch thread for the rest of the module (a folder's conftest makes it autouse)."""
    with torch_on_one_thread():
        yield


def assert_finite_metrics(row: dict, names) -> None:
    """Every name in ``names`` is in ``row`` and is a finite number (or a list of them)."""
    for name in names:
        assert name in row, f"metric {name} was not reported; got {sorted(row)}"
        values = row[name] if isinstance(row[name], list) else [row[name]]
        for value in values:
            assert isinstance(value, (int, float)) and math.isfinite(value), f"{name} = {row[name]}"


def pytest_terminal_summary(terminalreporter):
    """Count the deprecation warnings of the run (they are not filtered: see pyproject.toml)."""
    warned = terminalreporter.stats.get("warnings", [])
    deprecations = [w for w in warned if "Deprecat" in str(getattr(w, "message", ""))
                    or "FutureWarning" in str(getattr(w, "message", ""))]
    terminalreporter.write_line(
        f"deprecation warnings: {len(deprecations)} (of {len(warned)} warnings); "
        "see the warnings summary above")
