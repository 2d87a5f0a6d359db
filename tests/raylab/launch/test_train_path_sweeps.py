"""Trials on Ray Train workers through real Ray Tune: repeatable, one retry budget, checkpoints
in the trial folder, a corrupted newest checkpoint skipped after a worker is killed."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import psutil
import pytest
from conftest import assert_finite_metrics
from faults import saved_checkpoints, strike_when, trial_rows

from raylab import checkpoint as ckpt
from raylab.run_folder import TrialFolder

TWO_WORKERS = ["resources.workers=2", "resources.cpus_per_worker=1"]


# The two-worker smoke runs once by default; RAYLAB_REPEAT_SMOKE=3 repeats it (in a row, in
# one test, as a flake hunt).
REPEATS = int(os.environ.get("RAYLAB_REPEAT_SMOKE", "1"))


@pytest.mark.slow
def test_two_worker_smoke_passes_every_time(smoke_sweep):
    """The smoke run on two workers (RAYLAB_REPEAT_SMOKE times in a row): each ends well, writes
    its trial's config.yaml, and keeps its checkpoints in the trial folder, where Tune's result
    finds them."""
    for attempt in range(REPEATS):
        results, run_path, _ = smoke_sweep("toy", "search.seed=[0]", *TWO_WORKERS, run_name=f"again-{attempt}")
        (result,) = results
        assert result.error is None, result.error
        assert_finite_metrics(result.metrics, ["train/loss", "eval/mse", "train/step"])
        assert result.metrics["train/step"] == 60
        assert TrialFolder.at(result.path).config()["steps"] == 60
        assert result.checkpoint is not None
        assert Path(result.checkpoint.path).parent == Path(result.path)
        assert ckpt.load(result.checkpoint.path)["step"] == 60
        assert not (Path(run_path) / "_raylab" / "train" / result.metrics["trial_id"]).exists()


@pytest.mark.slow
@pytest.mark.parametrize("resources", [[], TWO_WORKERS], ids=["tune", "ray_train"])
@pytest.mark.long
def test_failing_loop_is_attempted_exactly_max_failures_plus_one_times(smoke_sweep, toy_with_loop, tmp_path, resources):
    experiment = toy_with_loop("tests.raylab.launch.failing_loop:train_loop", "toy_failing")
    results, run_path, _ = smoke_sweep(experiment, "failure.max_failures=2", *resources, smoke=False)
    (result,) = results
    assert result.error is not None
    # Attempt n reports step n from attempt n-1's checkpoint, then fails: the third and last
    # attempt failing on step 3 shows each one resumed the one before, and no fourth ran.
    assert "injected failure on attempt 3" in str(result.error)
    (rows,) = trial_rows(Path(run_path)).values()
    steps = [row["train/step"] for row in rows]
    # Tune may drop from result.json a row that arrives together with its trial's failure
    # (attempt 1's or 2's, in some runs); the rows it keeps are attempts in order, one process each.
    assert steps and set(steps) <= {1, 2, 3} and steps == sorted(set(steps)), steps
    assert len({row["attempt_pid"] for row in rows}) == len(rows)


def ray_train_workers() -> list[psutil.Process]:
    """This test process's Ray Train worker processes."""
    me = os.getpid()
    return [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"]
        and p.info["cmdline"][0].startswith("ray::RayTrainWorker")
        and any(parent.pid == me for parent in p.parents())
    ]


@pytest.mark.slow
@pytest.mark.long
def test_killed_worker_with_corrupted_newest_checkpoint_resumes_from_the_previous(smoke_sweep, tmp_path):
    struck = []
    release = tmp_path / "release"

    def corrupt_and_kill(trial, rows):
        newest = trial.checkpoint_paths()[0]
        newest_step = ckpt.load(newest)["step"]
        state = newest / ckpt.STATE_FILE
        state.write_bytes(state.read_bytes()[:-9])
        workers = ray_train_workers()[:1]
        for worker in workers:
            worker.send_signal(signal.SIGKILL)
        struck.append((newest.name, newest_step, len(workers)))
        release.touch()  # the restarted run passes the hold

    def two_checkpoints(trial, rows):
        return len(saved_checkpoints(trial)) >= 2

    watcher = strike_when(tmp_path / "results" / "killed", two_checkpoints, corrupt_and_kill, timeout_s=600)
    # The trial is held after its report at step 100 (checkpoints at 40 and 80) until the strike,
    # however late result.json shows the second checkpoint on a loaded machine.
    safety = threading.Timer(600, release.touch)  # no strike: the run goes on, the test fails
    safety.start()
    try:
        results, run_path, _ = smoke_sweep(
            "toy",
            "search.seed=[0]",
            *TWO_WORKERS,
            "config.steps=400",
            "config.hold_at_step=100",
            f"config.release_file={release}",
            "failure.max_failures=1",
            run_name="killed",
        )
    finally:
        safety.cancel()
    watcher.join(timeout=5)
    assert struck, "never struck"
    newest_name, newest_step, killed = struck[0]
    assert killed == 1, "no Ray Train worker to kill"
    (result,) = results
    assert result.error is None, result.error
    (rows,) = trial_rows(Path(run_path)).values()
    # Each Train run reports the step it resumed from: the second run's first report shows it.
    resumed = sorted({row["train/resumed_from_step"] for row in rows} - {0})
    assert resumed, [row["train/step"] for row in rows]
    # The corrupted newest was skipped: the run resumed from the one before it, not from step 0.
    assert 0 < resumed[0] < newest_step, (resumed, newest_step)
    assert rows[-1]["train/step"] == 400
    logs = "".join(p.read_text(errors="replace") for p in Path("/tmp/ray/session_latest/logs").glob("*.err"))
    assert "skipping corrupted checkpoint" in logs and newest_name in logs
