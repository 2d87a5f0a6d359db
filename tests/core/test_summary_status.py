"""A trial's status in the end-of-sweep table: from its last result, or from its ended marker."""

from __future__ import annotations

from types import SimpleNamespace

from raylab import run_files, summary, sweep


def result(trial_id: str, done: bool, error=None):
    metrics = {"trial_id": trial_id, "done": done, "training_iteration": 2, "eval/mse": 0.1}
    return SimpleNamespace(metrics=metrics, metrics_dataframe=None, error=error, config={},
                           path=f"/runs/r/toy_{trial_id}")


def test_a_trial_whose_loop_returned_is_terminated_though_its_saved_result_lacks_done(tmp_path):
    # As Tune 2.60 can restore a trial whose function returned just before the sweep was
    # killed: status TERMINATED, its last result without ``done``.
    run = str(tmp_path / "run")
    results = [result("a_00000", done=False), result("a_00001", done=False), result("a_00002", done=True)]
    run_files.mark_trial_ended(run, "a_00000")

    ended = sweep.ended_trials(run, results)
    assert ended == {"a_00000"}
    table = summary.rows(results, "eval/mse", "min", [], ended=ended)
    assert [row["status"] for row in table] == ["TERMINATED", "STOPPED", "TERMINATED"]
    assert run_files.trial_ended(run, "a_00000") and not run_files.trial_ended(run, "a_00001")


def test_an_errored_trial_stays_an_error_whatever_its_marker():
    (row,) = summary.rows([result("a_00000", done=False, error=RuntimeError("x"))], "eval/mse", "min", [],
                          ended=frozenset({"a_00000"}))
    assert row["status"] == "ERROR"
