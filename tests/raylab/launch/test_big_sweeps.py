"""Big sweeps planned and watched: the trial count from the search space, the console's one
status line above ``COLLAPSE_ABOVE`` trials, and an ETA right within a factor of 2 while Tune
creates its trials lazily."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from raylab import experiment as experiments
from raylab import tune as raylab_tune
from raylab.launch import progress

STEPS = 400


def toy_sweep(trials: int):
    """The toy experiment with ``trials`` trials (2 seeds x num_samples), stopped at 400 steps."""
    return experiments.load("toy", [f"num_samples={trials // 2}", f"stop.train/step={STEPS}"])


def simulate(experiment, concurrency: int, trial_s: float, created_ahead: int = 1, report_s: float = 5.0):
    """Drive the progress callback as Tune drives it, on a fake clock: ``concurrency`` trials
    run at once, each ``trial_s`` seconds, reporting every ``report_s``; Tune creates a trial
    only when it is about to run (``created_ahead`` pending ones at most), so its trial list
    holds a fraction of the sweep. Returns the printed lines and the true total time."""
    total = progress.trial_count(experiment)
    now = [0.0]
    lines: list[str] = []
    callback = progress.callback(
        experiment, stream=SimpleNamespace(write=lines.append, flush=lambda: None), clock=lambda: now[0]
    )
    callback.setup()
    trials: list[SimpleNamespace] = []
    started: dict[str, float] = {}
    while True:
        running = [t for t in trials if t.status == "RUNNING"]
        for trial in running:  # reports and ends
            share = min(1.0, (now[0] - started[trial.trial_id]) / trial_s)
            result = {"train/step": share * STEPS, "training_iteration": 1, "iterations_since_restore": 1}
            callback.on_trial_result(iteration=0, trials=trials, trial=trial, result=result)
            if share >= 1.0:
                trial.status = "TERMINATED"
                callback.on_trial_complete(iteration=0, trials=trials, trial=trial)
        while len(trials) < total and sum(t.status == "PENDING" for t in trials) < created_ahead:
            trials.append(SimpleNamespace(trial_id=f"t{len(trials)}", status="PENDING"))
        for trial in [t for t in trials if t.status == "PENDING"]:
            if sum(t.status == "RUNNING" for t in trials) < concurrency:
                trial.status = "RUNNING"
                started[trial.trial_id] = now[0]
                callback.on_trial_start(iteration=0, trials=trials, trial=trial)
        callback.on_step_end(iteration=0, trials=trials)
        if all(t.status == "TERMINATED" for t in trials) and len(trials) == total:
            return lines, now[0]
        now[0] += report_s


def seconds(eta: str) -> float:
    number, unit = eta.split()
    return float(number) * {"s": 1, "min": 60, "h": 3600}[unit]


def test_the_eta_of_a_1000_trial_sweep_is_right_within_a_factor_of_2():
    lines, end = simulate(toy_sweep(1000), concurrency=4, trial_s=60.0)
    etas = [
        (float(m.group(1)), seconds(m.group(2)))
        for line in lines
        if (m := re.match(r"\[\s*(\d+)s\] .*; ETA (.+)$", line.strip()))
    ]
    assert len(etas) > 100
    for at, eta in etas:
        if at >= 60:  # once the first trials have run a while
            assert (end - at) / 2 <= eta <= (end - at) * 2, (at, eta, end)
    assert any("pending of 1000" in line for line in lines)


def test_above_50_trials_the_console_prints_one_status_line_not_a_line_per_trial():
    lines, _ = simulate(toy_sweep(100), concurrency=4, trial_s=20.0)
    assert not any(re.search(r"\bt\d+ (started|finished|iter)", line) for line in lines)
    assert "100 trials: one status line every 15 s" in lines[0]
    few, _ = simulate(toy_sweep(50), concurrency=4, trial_s=20.0)
    assert any(re.search(r"\bt\d+ started", line) for line in few)  # 50 trials: a line per trial still


def test_the_dry_run_prints_the_expected_wall_time_and_where_the_trial_time_comes_from(capsys):
    argv = ["toy", "--smoke", "num_samples=2500", "search.seed=[0, 1]", "--dry-run"]
    assert raylab_tune.main(argv) == 0
    out = capsys.readouterr().out
    assert "# trials: 5000;" in out
    (wall,) = [line for line in out.splitlines() if line.startswith("# wall time:")]
    assert "5000 trials x" in wall and "at once" in wall


@pytest.mark.parametrize("interrupted_rows", [3])
def test_an_interrupted_sweep_counts_the_trials_tune_had_not_made(interrupted_rows, monkeypatch, capsys, tmp_path):
    from raylab.launch import ray_start, sweep

    rows = [{"trial": f"t{i}", "status": "RUNNING"} for i in range(interrupted_rows)]
    done = sweep.SweepResult(results=[], ended=frozenset(), rows=rows)
    monkeypatch.setattr(ray_start, "connect", lambda *a, **k: {"dashboard_url": None})
    monkeypatch.setattr(sweep, "run", lambda *a, **k: done)
    argv = ["toy", "--smoke", "num_samples=50", "--storage", str(tmp_path), "--name", "r"]
    assert raylab_tune.main(argv) == 130
    assert "interrupted with 100 unfinished trial(s)" in capsys.readouterr().err
