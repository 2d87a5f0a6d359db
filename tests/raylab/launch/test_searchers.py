"""``search_alg:``: Optuna's TPE from the experiment YAML (validated with the rest of the
spec), the dry run naming it, and a resumed Optuna sweep that does not repeat a config."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raylab import experiment as experiments
from raylab import tune as raylab_tune
from raylab.errors import UserError
from raylab.launch import searcher
from raylab.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[3]
TPE_TOY = [
    "search.lr={loguniform: [0.001, 0.2]}",
    "search.seed={choice: [0, 1, 2]}",
    "search_alg.type=optuna",
]


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["search_alg.type=optuna"], "search.seed: a grid cannot be searched by search_alg.type optuna"),
        (["search_alg.max_concurrent=2"], "search_alg.max_concurrent: needs type: optuna"),
        ([*TPE_TOY, "search_alg.sampler=cmaes"], "search_alg.sampler: 'cmaes' is not one of 'tpe', 'random'"),
        ([*TPE_TOY, "search_alg.objectives={eval/mse: min}"], "already the experiment's metric"),
        ([*TPE_TOY, "search_alg.objectives={eval/acc: max}"], "search_alg.objectives.eval/acc: not reported"),
        (
            [*TPE_TOY, "search_alg.objectives={train/loss: up}"],
            "search_alg.objectives.train/loss: 'up' is not one of 'min', 'max'",
        ),
        ([*TPE_TOY, "time_budget_s=-1"], "time_budget_s: must be >= 0"),
    ],
)
def test_a_search_alg_that_cannot_search_is_one_line(overrides, fragment):
    with pytest.raises(UserError, match=None) as err:
        experiments.load("toy", overrides)
    assert fragment in str(err.value), str(err.value)


def test_the_shipped_tpe_experiment_names_its_searcher_in_the_dry_run(capsys):
    experiment = experiments.load("fair_adv_digits_tpe")
    assert experiment.search_alg.type == "optuna" and experiment.search_alg.objectives == {"val/clean_acc": "max"}
    assert raylab_tune.main(["fair_adv_digits_tpe", "--smoke", "--dry-run"]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("# searcher:")]
    assert "Optuna TPE (seed 0): 2 random trial(s), then each next config from a model" in line
    assert "4 trial(s) in all; at most 1 at once (ConcurrencyLimiter)" in line
    assert "max val/robust_acc_worst_class and max val/clean_acc (a Pareto front" in line
    out_random = raylab_tune.main(["toy", "--dry-run"]) == 0 and capsys.readouterr().out
    assert "# searcher: Tune's variant generator: 2 grid point(s) x num_samples 2, sampling lr at random" in out_random


def test_the_searcher_is_seeded_and_limited():
    experiment = experiments.load("toy", [*TPE_TOY, "search_alg.max_concurrent=2", "search_alg.seed=7"])
    limiter = searcher.make_searcher(experiment)
    assert type(limiter).__name__ == "ConcurrencyLimiter" and limiter.max_concurrent == 2
    assert limiter.searcher._sampler._rng.rng.random() == pytest.approx(
        __import__("numpy").random.RandomState(7).random_sample()
    )
    assert searcher.param_space(experiment) == experiment.config  # the searcher holds the space


def trial_configs(run: Path, keys: tuple[str, ...]) -> dict[str, tuple]:
    """Each trial folder's searched values, by folder."""
    out = {}
    for trial in RunFolder(str(run)).trials():
        params = trial.params()
        if params:
            out[trial.name] = tuple(params[key] for key in keys)
    return out


RESUMED = [
    pytest.param(
        "toy",
        [*TPE_TOY, "num_samples=6", "search_alg.n_startup_trials=2", "search_alg.max_concurrent=1"],
        ("lr", "seed"),
        6,
        marks=[pytest.mark.slow, pytest.mark.long],
        id="toy",
    ),
    # the shipped experiment's own smoke sweep: 4 trials of TPE under ASHA, one at a time
    pytest.param(
        "fair_adv_digits_tpe", [], ("lr", "weight_decay", "trades_beta"), 4, marks=pytest.mark.slow, id="shipped"
    ),
]


@pytest.mark.parametrize("name, overrides, keys, trials", RESUMED)
def test_a_resumed_optuna_sweep_does_not_repeat_a_config(tmp_path, name, overrides, keys, trials):
    """A TPE smoke sweep stopped by Ctrl-C once its third trial started (one trial runs at a
    time) and resumed with ``--resume``: the searcher's state comes back with it
    (``Tuner.restore``), so every trial holds a different config (a fresh sampler with the same
    seed would suggest the first ones again)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "raylab.tune", name, "--smoke", "--storage", str(tmp_path), "--name", "tpe"]
    first = subprocess.Popen(
        [*argv, *overrides, "--quiet"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    run = tmp_path / "tpe"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and first.poll() is None:
        if run.is_dir() and len(trial_configs(run, keys)) >= 3:
            break
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    output = first.communicate(timeout=180)[0]
    assert first.returncode == 130, output[-3000:]
    before = trial_configs(run, keys)
    assert 2 <= len(before) < trials, before
    resume = [sys.executable, "-m", "raylab.tune", name, "--resume", "--storage", str(tmp_path), "--name", "tpe"]
    done = subprocess.run([*resume, "--quiet"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    after = trial_configs(run, keys)
    assert len(after) == trials and {k: after[k] for k in before} == before
    assert len(set(after.values())) == trials, after


@pytest.mark.slow
def test_time_budget_ends_a_tpe_sweep_before_its_trial_budget(ray_session, tmp_path):
    """``time_budget_s``: a 40-trial TPE sweep of trials that take a second or more each, given
    a budget of 6 s, stops starting trials then and returns with fewer than 40."""
    from raylab.launch import sweep

    experiment = experiments.load(
        "toy", [*TPE_TOY, "config.steps=20", "config.step_time_s=0.05", "num_samples=40", "time_budget_s=6"]
    )
    run = RunFolder.under(str(tmp_path), "budget")
    started = time.monotonic()
    done = sweep.run(experiment, run, verbose=0)
    assert 1 <= len(done.rows) < 40, len(done.rows)
    assert time.monotonic() - started < 120
