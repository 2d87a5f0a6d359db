"""The report on the everyday path: sweeps before debug runs, variant fields once, wide
tables that scroll."""

from __future__ import annotations

import json
import os

import yaml

from raylab.report import write_report
from raylab.report.aggregate import label_of
from raylab.report.data import _swept_keys, find_run


def test_an_experiment_name_skips_raylab_train_debug_runs_unless_asked(tmp_path):
    for age, (name, command) in enumerate([("exp-train-20260201-000000", "raylab.train"),
                                           ("exp-20260101-120000", "raylab.tune")][::-1]):
        (tmp_path / name).mkdir()
        saved = tmp_path / name / "experiment.yaml"
        saved.write_text(yaml.safe_dump({"name": "exp", "provenance": {"command": command}}))
        os.utime(saved, (1e9 + age, 1e9 + age))  # the debug run is the newer one
    assert find_run("exp", str(tmp_path)) == str(tmp_path / "exp-20260101-120000")
    assert find_run("exp", str(tmp_path), train_runs=True) == str(tmp_path / "exp-train-20260201-000000")


def test_variant_fields_are_swept_once_and_unset_ones_are_not_labelled():
    search = {"variant": {"grid": [{"loss": "mse"}, {"loss": "soft_linf", "beta": 3.0},
                                   {"loss": "soft_linf", "beta": 30.0}]}, "seed": {"grid": [0]}}
    assert _swept_keys(search) == ["loss", "beta", "seed"]
    assert label_of(["loss", "beta"], ("mse", None)) == "loss=mse"
    assert label_of(["loss", "beta"], ("soft_linf", 3.0)) == "loss=soft_linf, beta=3"


def test_wide_tables_scroll_inside_their_box(tmp_path):
    run = tmp_path / "exp-20260101-120000"
    run.mkdir()
    keys = [f"a_rather_long_hyperparameter_name_{i}" for i in range(12)]
    (run / "experiment.yaml").write_text(yaml.safe_dump({
        "name": "exp", "workload": "not_registered_here", "metric": "score", "mode": "max",
        "search": {k: {"grid": [1]} for k in keys}, "num_samples": 1, "smoke": False}))
    trial = run / "t_00000"
    trial.mkdir()
    (trial / "params.json").write_text(json.dumps({k: 1 for k in keys}))
    (trial / "result.json").write_text(json.dumps({"score": 1.0, "training_iteration": 1}) + "\n")
    html = open(write_report(str(run), out=tmp_path / "report")).read()
    assert ".scroll{overflow-x:auto" in html
    assert html.count('<div class="scroll"><table>') == html.count("<table>") > 0
