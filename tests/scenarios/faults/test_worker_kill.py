"""SIGKILL a trial's worker mid-run: it restarts from its checkpoint and ends bit-identical."""

from __future__ import annotations

import os
import signal

import pytest
from faults import has_checkpoint_and_step, strike_when, trial_rows

OVERRIDES = ["search.seed=[0]", "config.steps=200", "config.step_time_s=0.02", "failure.max_failures=2"]


@pytest.mark.slow
def test_killed_worker_restarts_from_checkpoint_with_identical_metrics(smoke_sweep, tmp_path):
    # the uninterrupted reference needs no pacing (a pause does not change the metrics)
    reference, _, _ = smoke_sweep("toy", *OVERRIDES, "config.step_time_s=0", run_name="reference")
    killed = []

    def kill(trial_dir, rows):
        killed.append(rows[-1])
        os.kill(rows[-1]["pid"], signal.SIGKILL)

    watcher = strike_when(tmp_path / "results" / "faulty", has_checkpoint_and_step(80), kill)
    faulty, _, _ = smoke_sweep("toy", *OVERRIDES, run_name="faulty")
    watcher.join(timeout=5)

    assert killed, "the worker was never killed"
    (result,) = faulty
    assert result.error is None
    (rows,) = trial_rows(tmp_path / "results" / "faulty").values()
    assert len({row["pid"] for row in rows}) == 2  # a new worker process took over
    steps = [row["train/step"] for row in rows]
    restart = next(i for i in range(1, len(rows)) if rows[i]["pid"] != rows[0]["pid"])
    assert 20 < steps[restart] <= killed[0]["train/step"] + 20  # from a checkpoint, not step 0
    assert steps[-1] == 200
    for name in ("eval/mse", "train/loss"):
        assert result.metrics[name] == reference[0].metrics[name]  # bit-identical
