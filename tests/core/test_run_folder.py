"""One place for where results live: the newest run, a trial's status, local folders and URIs alike."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
from types import SimpleNamespace

import pytest
import yaml

from raylab.launch import summary
from raylab import experiment as experiments
from raylab.report.data import load_run
from raylab.run_folder import RunFolder, newest_run
from raylab.launch.trial import TrialSettings


def saved_run(root, name: str, experiment: str = "toy", smoke: bool = True, command: str | None = "raylab.tune",
              changed: float = 0.0) -> RunFolder:
    run = RunFolder.under(str(root), name)
    provenance = {"command": command} if command else {}
    run.write_text("experiment.yaml", yaml.safe_dump({"name": experiment, "smoke": smoke, "provenance": provenance}))
    os.utime(run.join("experiment.yaml"), (1e9 + changed, 1e9 + changed))
    return run


@pytest.mark.parametrize("as_uri", [False, True], ids=["local", "file-uri"])
def test_newest_run_keeps_the_experiment_the_kind_and_the_smoke_flag_asked(tmp_path, as_uri):
    saved_run(tmp_path, "toy-smoke-a", changed=1)
    saved_run(tmp_path, "toy-full", smoke=False, changed=2)
    saved_run(tmp_path, "my-debug-run", command="raylab.train", changed=3)  # a --name'd raylab.train run
    saved_run(tmp_path, "toy-train-20260101-000000", command=None, changed=4)  # older runs: told by their name
    saved_run(tmp_path, "other", experiment="backdoor", changed=5)
    (tmp_path / "stray").mkdir()  # no experiment.yaml: no run
    storage = f"file://{tmp_path}" if as_uri else str(tmp_path)
    names = lambda **kw: newest_run(storage, "toy", **kw).name  # noqa: E731
    assert names() == "toy-full"
    assert names(smoke=True) == "toy-smoke-a"
    assert names(train=True) == "toy-train-20260101-000000"
    assert names(train=True, keep=lambda run: not run.name.startswith("toy-train")) == "my-debug-run"
    assert names(train=None) == "toy-train-20260101-000000"
    assert newest_run(storage, "dqn_softlinf") is None
    assert newest_run(str(tmp_path / "nowhere"), "toy") is None


def test_the_summary_and_the_report_agree_on_an_interrupted_run(tmp_path):
    """Tune saves an interrupted sweep's stopped trials TERMINATED; only ``done`` or the ended
    marker makes a trial TERMINATED, in the end-of-sweep table and in the report alike."""
    run = RunFolder(tmp_path / "toy-smoke-20260101-000000")
    cases = {  # trial folder: (its rows' done flag, loop returned, failed)
        "toy_00000": (True, False, False),
        "toy_00001": (False, True, False),   # returned just before the kill: its marker says so
        "toy_00002": (False, False, False),  # stopped by the interrupt
        "toy_00003": (False, False, True),
    }
    state = {"trial_data": []}
    results = []
    for trial, (done, returned, failed) in cases.items():
        row = {"trial_id": trial, "training_iteration": 2, "eval/mse": 0.5, "done": done}
        run.write_text(f"{trial}/params.json", json.dumps({"seed": 0}))
        run.write_text(f"{trial}/result.json", json.dumps(row) + "\n")
        if failed:
            run.write_text(f"{trial}/error.txt", "ValueError: loss is nan\n")
        if returned:
            run.mark_ended(trial)
        state["trial_data"].append([json.dumps({"relative_logdir": trial, "status": "ERROR" if failed else "TERMINATED",
                                                "config": {"seed": 0}}), "{}"])
        results.append(SimpleNamespace(metrics=row, metrics_dataframe=None, error=RuntimeError() if failed else None,
                                       config={}, path=run.join(trial)))
    run.write_text("experiment_state-2026-01-01_00-00-00.json", json.dumps(state))

    table = summary.rows(results, "eval/mse", "min", [], ended=run.ended_trials())
    report = {t.name: t.status for t in load_run(run.location).trials}
    assert {row["trial"]: row["status"] for row in table} == report == {
        "toy_00000": "TERMINATED", "toy_00001": "TERMINATED", "toy_00002": "STOPPED", "toy_00003": "ERROR"}


def test_trial_settings_are_frozen_and_travel_to_workers(tmp_path):
    experiment = experiments.load("toy", ["resources.workers=2", "resources.cpus_per_worker=0.5"], smoke=True)
    run = RunFolder.under("s3://bucket/runs?endpoint_override=http://127.0.0.1:9000", "toy-1")
    settings = TrialSettings.of(experiment, run)
    assert (settings.workers, settings.cpus_per_worker, settings.run) == (2, 0.5, run.location)
    assert settings.train_storage == "s3://bucket/runs/toy-1/_raylab/train?endpoint_override=http://127.0.0.1:9000"
    assert run.name == "toy-1" and run.storage_root == "s3://bucket/runs?endpoint_override=http://127.0.0.1:9000"
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.workers = 3
    assert pickle.loads(pickle.dumps(dataclasses.replace(settings, resume="checkpoint"))).resume == "checkpoint"
