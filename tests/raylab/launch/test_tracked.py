"""What every tracker receives about a trial (``raylab.launch.trackers.payload``): no Ray, no tracker."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from raylab import experiment as experiments
from raylab import provenance, workloads
from raylab.launch import config_writer
from raylab.launch.trackers import payload


def test_nested_config_fields_are_flattened_with_dots_and_results_with_slashes():
    assert payload.params({"lr": 0.1, "model": {"width": 64, "act": {"kind": "relu"}}, "empty": {}}) == {
        "lr": 0.1,
        "model.width": 64,
        "model.act.kind": "relu",
        "empty": {},
    }
    result = {"eval": {"mse": 0.5}, "train/step": 20, "done": False, "config": {"lr": 0.1}, "trial_id": "a"}
    assert payload.metrics(result) == {"eval/mse": 0.5, "train/step": 20.0}


def test_a_trials_params_are_every_config_field_with_the_variants_fields_flat():
    """The issue's case: ``dqn_softlinf`` takes optimizer, lr and the epsilon schedule from its
    Config's defaults, ``dqn_softlinf_nature`` sets them in its YAML: both send every field,
    so their sweeps compare column by column; a variant group's fields arrive as fields."""
    names = {}
    for name in ("dqn_softlinf", "dqn_softlinf_nature"):
        experiment = experiments.load(name, smoke=True)
        fields = {f.name for f in dataclasses.fields(workloads.get(experiment.workload).config_class())}
        params = payload.params(config_writer.resolve(experiment, {"variant": {"loss": "mse"}, "seed": 3}))
        assert set(params) == fields and params["loss"] == "mse" and params["seed"] == 3
        assert "variant" not in params
        names[name] = set(params)
    assert names["dqn_softlinf"] == names["dqn_softlinf_nature"]


@pytest.mark.parametrize(
    "name, overrides, key",
    [
        ("dqn_softlinf", [], "env/steps"),  # its stop key
        ("fair_adv", [], "train/epoch"),  # its stop key
        ("toy", [], "train/step"),  # its scheduler's time_attr
        ("toy", ["scheduler.time_attr=training_iteration"], "training_iteration"),  # neither
        ("toy", ["scheduler.time_attr=time_total_s", "stop.time_total_s=5"], "training_iteration"),  # seconds
    ],
)
def test_the_step_is_the_workloads_own_counter(name, overrides, key):
    assert payload.step_key(experiments.load(name, overrides, smoke=True)) == key


def test_a_row_without_the_counter_keeps_the_last_step():
    assert payload.step_of({"env/steps": 2000.0, "training_iteration": 4}, "env/steps", None) == 2000
    assert payload.step_of({"eval/return_mean": 1.0, "training_iteration": 5}, "env/steps", 2000) == 2000
    assert payload.step_of({"training_iteration": 1}, "env/steps", None) == 1
    assert payload.step_of({"env/steps": float("nan"), "training_iteration": 2}, "env/steps", 7) == 7


def test_provenance_fields_are_flat_scalars_and_the_command_line_is_recorded(tmp_path):
    saved = provenance.record(tmp_path)  # not a git checkout: no git fields
    fields = payload.provenance_fields(saved)
    assert fields["raylab.command_line"] == provenance.command_line() and "raylab.git.commit" not in fields
    assert fields["raylab.versions.ray"] == provenance.versions()["ray"]
    assert all(isinstance(v, (str, bool, int, float)) for v in fields.values())
    both = payload.provenance_fields({"git": {"commit": "abc", "dirty": False}, "command_line": "x"})
    assert both == {"raylab.git.commit": "abc", "raylab.git.dirty": False, "raylab.command_line": "x"}
    assert payload.provenance_fields(None) == {}


def test_the_command_line_of_a_module_run_reads_as_python_dash_m(monkeypatch):
    main = type(sys)("__main__")
    main.__spec__ = type("Spec", (), {"name": "raylab.tune"})()
    monkeypatch.setitem(sys.modules, "__main__", main)
    line = provenance.command_line(["/x/raylab/tune.py", "toy", "--name", "my run"])
    assert line == "python -m raylab.tune toy --name 'my run'"
    main.__spec__ = None
    assert provenance.command_line(["bench.py", "--n", "3"]) == "bench.py --n 3"
