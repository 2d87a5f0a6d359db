"""The fixtures of ``raylab.testing``: one Ray per session, smoke sweeps, one smoke trial."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from raylab.testing.checks import torch_on_one_thread

ADDRESS_ENV = "RAYLAB_TEST_RAY_ADDRESS"
"""Join the Ray at this address instead of starting one (``ray_session``)."""

# Each worker's lines are shown, not folded into "repeated Nx" (a failing test reads them).
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def pytest_addoption(parser):
    parser.addoption(
        "--raylab-cpus",
        type=int,
        default=2,
        help="CPUs of the local Ray that raylab.testing's ray_session starts (default 2)",
    )


@pytest.fixture(scope="session")
def ray_session(request):
    """One Ray shared by all tests that need it: a local one (``--raylab-cpus`` CPUs), or the
    Ray at ``RAYLAB_TEST_RAY_ADDRESS`` (the joined Ray's workers import from its own environment
    and from this process's working directory, which Ray puts on their path).

    The local Ray's dashboard process runs, as ``raylab.tune`` starts it for Ray Train trials:
    Ray Train's placement-group cleaner asks Ray's State API (served there) whether a run's
    controller is alive, and without it a Train run stopped from outside (PBT, ASHA, a stop
    criterion) keeps its CPUs until Ray shuts down.
    """
    import ray

    started = not ray.is_initialized()  # a Ray this fixture did not start, it leaves up
    if started:
        address = os.environ.get(ADDRESS_ENV)
        if address:
            ray.init(address=address, logging_level=logging.ERROR)
        else:
            ray.init(
                address="local",
                num_cpus=request.config.getoption("raylab_cpus"),
                include_dashboard=True,
                dashboard_host="127.0.0.1",
                logging_level=logging.ERROR,
            )
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def smoke_sweep(ray_session, tmp_path):
    """``smoke_sweep(name, *overrides)``: run an experiment's smoke sweep through Ray Tune.

    Returns ``(result_grid, run_path, experiment)``; results go under ``tmp_path``.
    """
    from raylab import experiment as experiments
    from raylab.launch import checks, sweep
    from raylab.run_folder import RunFolder

    def run(name: str, *overrides: str, smoke: bool = True, resume: bool = False, run_name=None):
        experiment = experiments.load(name, list(overrides), smoke=smoke)
        storage = str(tmp_path / "results")
        if resume:  # the run --resume would continue, with its saved experiment
            folder = sweep.run_to_resume(storage, experiment.name, experiment.smoke, run_name)
            experiment = experiments.from_run(folder)
        else:
            folder = RunFolder.under(storage, run_name or experiments.new_run_name(experiment))
            if run_name:
                checks.check_run_name(folder)
        done = sweep.run(experiment, folder, resume=resume, verbose=0)
        return done.results, folder.location, experiment

    return run


@pytest.fixture(scope="session")
def shared_smoke_sweep(ray_session, tmp_path_factory):
    """``shared_smoke_sweep(name, *overrides)``: ``smoke_sweep``'s result for a sweep that several
    tests read and none changes, run once per test session (the first test that asks runs it).

    ``{shared}`` in an override is this session's folder of shared sweeps (a data folder there
    is shared too). Returns ``(result_grid, run_path, experiment)``.
    """
    from raylab import experiment as experiments
    from raylab.launch import sweep
    from raylab.run_folder import RunFolder

    root = tmp_path_factory.mktemp("shared_sweeps")
    done: dict[tuple[str, ...], tuple] = {}

    def run(name: str, *overrides: str):
        key = (name, *overrides)
        if key not in done:
            resolved = [o.replace("{shared}", str(root)) for o in overrides]
            experiment = experiments.load(name, resolved, smoke=True)
            folder = RunFolder.under(str(root / "results"), f"{Path(name).stem}-{len(done)}")
            done[key] = (sweep.run(experiment, folder, verbose=0).results, folder.location, experiment)
        return done[key]

    return run


@pytest.fixture
def local_trial(tmp_path):
    """``local_trial(name, *overrides, trial_dir=None, stop=None)``: one smoke trial in-process.

    Runs the train loop as ``python -m raylab.train --smoke`` would (search fields at their
    first value), in ``trial_dir`` (default: a fresh folder under ``tmp_path``). Returns the
    reported rows. ``stop`` adds stop criteria, for interrupting a trial to test resume.
    """
    from raylab import experiment as experiments
    from raylab import train as raylab_train
    from raylab.run_folder import TrialFolder

    def run(name: str, *overrides: str, trial_dir: Path | None = None, stop: dict | None = None):
        extra = [f"stop.{k}={v}" for k, v in (stop or {}).items()]
        experiment = experiments.load(name, [*overrides, *extra], smoke=True)
        config, _ = raylab_train.single_config(experiment)
        trial = TrialFolder.at(trial_dir or tmp_path / f"trial-{name}")
        return raylab_train.run_local(experiment, trial, config, verbose=False)

    return run


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
