"""The console's ETA comes from the running trials' progress toward the stop key before any
trial finishes: the status line and the Tune callback that prints it."""

from __future__ import annotations

from types import SimpleNamespace

from raylab import experiment as experiments
from raylab.launch import progress


def test_fraction_is_the_share_of_the_stop_criterion_reached():
    assert progress.fraction({"env/steps": 500}, {"env/steps": 2000}) == 0.25
    assert progress.fraction({"env/steps": 2500}, {"env/steps": 2000}) == 1.0
    assert progress.fraction({"train/loss": 0.1}, {"env/steps": 2000}) is None


def test_eta_from_running_trials_before_any_trial_finishes():
    # two trials running for 100 s, each a quarter of the way, two pending: 0.5 trials of work
    # done in 100 s, 3.5 left -> 700 s
    line = progress.status_line(["RUNNING", "RUNNING", "PENDING", "PENDING"], 100.0, [(0.25, 0.0), (0.25, 0.0)])
    assert line == "0 done, 2 running, 2 pending; ETA 12 min"
    # with finished trials the old rule holds (no running progress): elapsed / done x (total - done)
    assert progress.status_line(["TERMINATED", "PENDING"], 60.0) == "1 done, 0 running, 1 pending; ETA 60 s"
    # a trial restored at half way that has made a further quarter: only that quarter is this run's work
    assert progress.status_line(["RUNNING"], 50.0, [(0.75, 0.5)]) == "0 done, 1 running, 0 pending; ETA 50 s"


def test_at_start_reads_the_restore_point_from_tunes_counters():
    assert progress.at_start({"training_iteration": 4, "iterations_since_restore": 4}, 0.4) == 0.0
    assert progress.at_start({"training_iteration": 8, "iterations_since_restore": 2}, 0.8) == 0.6000000000000001


def test_the_callback_prints_an_eta_from_progress_lines_before_any_trial_finishes():
    experiment = experiments.load("toy", ["stop.train/step=100"], smoke=True)
    key, limit = "train/step", 100
    now = [0.0]
    lines = []
    stream = SimpleNamespace(write=lines.append, flush=lambda: None)
    callback = progress.callback(experiment, stream=stream, status_every_s=60, clock=lambda: now[0])
    callback.setup()
    trials = [SimpleNamespace(trial_id=f"t{i}", status="RUNNING") for i in range(2)]
    now[0] = 30.0
    for trial in trials:  # each a fifth of the way at 30 s
        result = {key: limit / 5, "training_iteration": 1, "iterations_since_restore": 1}
        callback.on_trial_result(iteration=0, trials=trials, trial=trial, result=result)
    assert f"{key}={progress._number(limit / 5)}/{progress._number(limit)}" in lines[-2]
    now[0] = 60.0
    callback.on_step_end(iteration=0, trials=trials)
    # 0.4 trials of work in 60 s, 1.6 left -> 240 s
    assert [t for t in lines if t.strip()][-1] == "[    60s] 0 done, 2 running, 0 pending; ETA 4 min"
