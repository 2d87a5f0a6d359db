"""One place for where results live: the newest run, a trial's status, local folders and URIs alike."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from raylab import experiment as experiments
from raylab.launch import summary
from raylab.launch.trial import TrialSettings
from raylab.report.run_view import load_run
from raylab.run_folder import (
    CHECKPOINT_PREFIX,
    CONFIG_FILE,
    ERROR_FILE,
    PARAMS_FILE,
    RESULT_FILE,
    RunFolder,
    TrialFolder,
    checkpoint_name,
    newest_run,
)


def saved_run(
    root,
    name: str,
    experiment: str = "toy",
    smoke: bool = True,
    command: str | None = "raylab.tune",
    changed: float = 0.0,
) -> RunFolder:
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
        "toy_00001": (False, True, False),  # returned just before the kill: its marker says so
        "toy_00002": (False, False, False),  # stopped by the interrupt
        "toy_00003": (False, False, True),
    }
    state = {"trial_data": []}
    results = []
    for trial, (done, returned, failed) in cases.items():
        row = {"trial_id": trial, "training_iteration": 2, "eval/mse": 0.5, "done": done}
        run.trial(trial).write_params({"seed": 0})
        run.trial(trial).write_rows([row])
        if failed:
            run.trial(trial).write_error("ValueError: loss is nan\n")
        if returned:
            run.mark_ended(trial)
        state["trial_data"].append(
            [
                json.dumps(
                    {"relative_logdir": trial, "status": "ERROR" if failed else "TERMINATED", "config": {"seed": 0}}
                ),
                "{}",
            ]
        )
        results.append(
            SimpleNamespace(
                metrics=row,
                metrics_dataframe=None,
                error=RuntimeError() if failed else None,
                config={},
                path=run.join(trial),
            )
        )
    run.write_text("experiment_state-2026-01-01_00-00-00.json", json.dumps(state))

    table = summary.rows(results, "eval/mse", "min", [], ended=run.ended_trials())
    report = {t.name: t.status for t in load_run(run.location).trials}
    assert (
        {row["trial"]: row["status"] for row in table}
        == report
        == {"toy_00000": "TERMINATED", "toy_00001": "TERMINATED", "toy_00002": "STOPPED", "toy_00003": "ERROR"}
    )


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


@pytest.mark.parametrize("as_uri", [False, True], ids=["local", "file-uri"])
def test_a_trial_folder_reads_back_what_its_writers_wrote(tmp_path, as_uri):
    """Params, rows (a line still being written skipped), error, config and checkpoints go in and
    come back through ``TrialFolder``, on a local folder and through a URI alike."""
    run = RunFolder(f"file://{tmp_path}/run" if as_uri else tmp_path / "run")
    trial = run.trial("toy_00000")
    assert not trial.is_trial() and trial.params() == {} and trial.rows() == [] and trial.error() is None
    trial.write_params({"lr": 0.1, "variant": {"loss": "mse"}})
    trial.write_rows([{"train/loss": 1.0}])
    trial.append_row({"train/loss": 0.5})
    trial.write_error("Traceback ...\nValueError: boom\n")
    trial.write_config({"lr": 0.1, "steps": 60})
    assert trial.is_trial() and [t.name for t in run.trials()] == ["toy_00000"]
    assert trial.params() == {"lr": 0.1, "variant": {"loss": "mse"}}
    assert trial.rows() == [{"train/loss": 1.0}, {"train/loss": 0.5}]
    assert trial.error().endswith("ValueError: boom\n") and trial.error_location == trial.join(ERROR_FILE)
    assert trial.config() == {"lr": 0.1, "steps": 60}
    assert TrialFolder.at(trial.location) == trial and run.trial("other").params() == {}
    if not as_uri:
        for number in (1, 2, 10):
            trial.checkpoint_path(number).mkdir()
        assert trial.checkpoints() == [checkpoint_name(1), checkpoint_name(2), checkpoint_name(10)]
        assert trial.last_checkpoint_number() == 10
        trial.prune_checkpoints(2)
        assert trial.checkpoints() == [checkpoint_name(2), checkpoint_name(10)]
        assert [p.name for p in trial.checkpoint_paths()] == [checkpoint_name(10), checkpoint_name(2)]
        assert [t.name for t in run.trials()] == ["toy_00000"]  # checkpoints inside are no trials


@pytest.mark.parametrize("as_uri", [False, True], ids=["local", "file-uri"])
def test_a_local_folder_uploaded_into_a_run_reads_back_whole(tmp_path, as_uri):
    from raylab import checkpoint as ckpt

    run = RunFolder(f"file://{tmp_path}/run" if as_uri else tmp_path / "run")
    ckpt.save(tmp_path / "written", {"step": 3})
    where = run.upload(tmp_path / "written", "_shared/one")
    assert where == run.join("_shared/one") and run.kind("_shared/one/state.pt") == "file"
    assert ckpt.load_at(where)[0] == {"step": 3} and run.trials() == []


def test_a_half_written_row_is_skipped(tmp_path):
    trial = RunFolder(tmp_path).trial("t")
    trial.write_rows([{"a": 1}])
    trial.append_row({"a": 2})
    with open(trial.path / RESULT_FILE, "a") as f:  # a trial still writing its next row
        f.write('{"a": 3')
    assert trial.rows() == [{"a": 1}, {"a": 2}]


# ------------------------------------------------------------------------ the layout in one place

REPO = Path(__file__).resolve().parents[2]
SPELLED = re.compile(
    r"(?<![\w.-])("
    + "|".join(
        [
            *(re.escape(name) for name in (PARAMS_FILE, RESULT_FILE, ERROR_FILE, CONFIG_FILE)),
            re.escape(CHECKPOINT_PREFIX) + "(?![a-z])",
        ]
    )
    + ")"
)
"""A trial folder's file names as code spells them: whole names (``ray_bootstrap_config.yaml`` is
none), ``checkpoint_`` not followed by a word (``checkpoint_every`` is a setting)."""


def spelled_trial_files(path: Path) -> list[str]:
    """``file:line: literal`` for each string in the code of ``path`` (docstrings and other bare
    string statements are prose, not code) that names a file of a trial folder."""
    tree = ast.parse(path.read_text(), str(path))
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [
        f"{path}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in prose
        and SPELLED.search(node.value)
    ]


def test_only_run_folder_spells_a_trial_folders_file_names():
    """Every reader and writer of a trial folder goes through ``RunFolder``/``TrialFolder``: no
    module of raylab/, trainers/ or benchmarks/ and no test but raylab/run_folder.py names
    params.json, result.json, error.txt, config.yaml or checkpoint_ in its code."""
    sources = [
        p
        for top in ("raylab", "trainers", "benchmarks", "tests")
        for p in sorted((REPO / top).rglob("*.py"))
        if p != REPO / "raylab" / "run_folder.py"
    ]
    found = [line for path in sources for line in spelled_trial_files(path)]
    assert not found, "go through raylab.run_folder.TrialFolder:\n" + "\n".join(found)


def test_the_layout_check_sees_code_and_not_prose(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        f'"""Reads {RESULT_FILE}."""\n\n\ndef rows(d):\n    """From {PARAMS_FILE}."""\n'
        f'    return open(d + "/{RESULT_FILE}"), f"{{d}}/{checkpoint_name(3)}", "checkpoint_every"\n'
    )
    assert sorted(line.split(": ", 1)[1] for line in spelled_trial_files(planted)) == [
        repr(f"/{CHECKPOINT_PREFIX}000003"),
        repr(f"/{RESULT_FILE}"),
    ]
