"""``session.run_folder()``: a trial learns its run's folder (where what its run shares lives)."""

from __future__ import annotations

import pytest

from raylab import session
from raylab.run_folder import RunFolder, TrialFolder


@pytest.fixture(autouse=True)
def _fresh_session():
    yield
    session.start()


def test_a_trial_of_a_run_knows_its_run_folder_and_a_bare_loop_has_none(tmp_path):
    session.start(backend="local")
    assert session.run_folder() is None  # a workload's own runner, no run

    session.start(backend="local", trial=TrialFolder.at(tmp_path / "run-1" / "trial"))  # python -m raylab.train
    assert session.run_folder() == RunFolder(tmp_path / "run-1")

    uri = "s3://bucket/runs/run-2?endpoint_override=http://127.0.0.1:9000&scheme=http"
    session.start(backend="tune", run=uri)  # a sweep's trial: TrialSettings.run, as run_trial passes it
    assert session.run_folder() == RunFolder(uri)
    assert (
        session.run_folder().join("x") == "s3://bucket/runs/run-2/x?endpoint_override=http://127.0.0.1:9000&scheme=http"
    )


def test_run_trial_hands_the_sweeps_run_folder_to_the_session(tmp_path, monkeypatch):
    """What a sweep's trial process runs (``raylab.launch.trial.run_trial``) starts its session
    with the run folder its settings carry (checked on the Ray Train backend's branch, which
    asks Tune nothing; Ray itself is not started)."""
    from raylab.files import LAUNCH_DIR_ENV
    from raylab.launch import trial

    seen = {}
    monkeypatch.setenv(LAUNCH_DIR_ENV, str(tmp_path))  # run_trial sets it; restored after the test
    monkeypatch.setattr(session, "hide_unreserved_gpus", lambda: None)
    monkeypatch.setattr(trial.workloads, "resolve", lambda _: lambda config: seen.update(run=session.run_folder()))
    settings = trial.TrialSettings(
        loop="x:y", checkpoint_every=1, keep=1, mode="max", experiment="e", metric="m", launch_dir=str(tmp_path),
        run="s3://bucket/runs/run-3",
    )  # fmt: skip
    trial.run_trial(settings, "train", {})
    assert seen["run"] == RunFolder("s3://bucket/runs/run-3")
