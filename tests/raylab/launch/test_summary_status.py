"""A trial's status in the end-of-sweep table: from its last result, or from its ended marker."""

from __future__ import annotations

from types import SimpleNamespace

from raylab.launch import summary, sweep
from raylab.run_folder import RunFolder


def result(trial_id: str, done: bool, error=None):
    metrics = {"trial_id": trial_id, "done": done, "training_iteration": 2, "eval/mse": 0.1}
    return SimpleNamespace(
        metrics=metrics, metrics_dataframe=None, error=error, config={}, path=f"/runs/r/toy_{trial_id}"
    )


def test_a_trial_whose_loop_returned_is_terminated_though_its_saved_result_lacks_done(tmp_path):
    # As Tune 2.60 can restore a trial whose function returned just before the sweep was
    # killed: status TERMINATED, its last result without ``done``.
    run = RunFolder(tmp_path / "run")
    results = [result("a_00000", done=False), result("a_00001", done=False), result("a_00002", done=True)]
    run.mark_ended("a_00000")

    ended = sweep.ended_trials(run, results)
    assert ended == {"a_00000"}
    table = summary.rows(results, "eval/mse", "min", [], ended=ended)
    assert [row["status"] for row in table] == ["TERMINATED", "STOPPED", "TERMINATED"]
    assert run.ended("a_00000") and not run.ended("a_00001")


def test_an_errored_trial_stays_an_error_whatever_its_marker():
    (row,) = summary.rows(
        [result("a_00000", done=False, error=RuntimeError("x"))], "eval/mse", "min", [], ended=frozenset({"a_00000"})
    )
    assert row["status"] == "ERROR"


def test_summary_csv_has_a_column_per_variant_field_and_every_reported_metrics_last_value():
    import csv
    import io

    import pandas as pd

    history = pd.DataFrame({"train/loss": [0.5, 0.3, 0.2], "eval/mse": [0.4, None, 0.1]})
    trial = SimpleNamespace(
        metrics={"trial_id": "a_00000", "done": True, "training_iteration": 3, "train/loss": 0.2},
        metrics_dataframe=history,
        error=None,
        path="/runs/r/toy_a_00000",
        config={"variant": {"loss": "softlinf", "beta": 2.0}, "seed": 1},
    )
    table = summary.rows(
        [trial], "train/loss", "min", ["variant", "seed"], reported=("train/loss", "eval/mse", "train/step")
    )
    (row,) = csv.DictReader(io.StringIO(summary.to_csv(table)))
    assert row["variant.loss"] == "softlinf" and row["variant.beta"] == "2.0" and row["seed"] == "1"
    assert "variant" not in row
    assert row["train/loss (last)"] == "0.2" and row["train/loss (min)"] == "0.2"
    assert row["eval/mse (last)"] == "0.1"  # reported at its own cadence: its last value, not the last row's
    assert row["train/step (last)"] == ""  # never reported
