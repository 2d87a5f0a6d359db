"""Two sweeps on one machine, each with the local Ray it started: Ray Train trials in both."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raylab.run_folder import RunFolder

REPO = Path(__file__).resolve().parents[3]
RAY_TRAIN = ["resources.workers=2", "resources.cpus_per_worker=0.5", "search.seed=[0]"]
ANOTHER_RAY = "multiple active Ray instances"


def tune_cli(*args: str, storage: Path) -> subprocess.Popen:
    # --verbose: the workers' output and Ray's tracebacks reach the console, where a lookup of
    # the wrong Ray would show.
    return subprocess.Popen(
        [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--verbose", "--storage", str(storage), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.slow
@pytest.mark.long
def test_a_ray_train_sweep_runs_while_another_sweep_with_its_own_ray_is_running(tmp_path):
    background = tune_cli(
        "--name",
        "background",
        *RAY_TRAIN,
        "search.steps=[4000]",
        "config.step_time_s=0.05",
        storage=tmp_path / "results",
    )
    try:
        deadline = time.monotonic() + 240
        while not any(trial.rows() for trial in RunFolder(tmp_path / "results" / "background").trials()):
            assert background.poll() is None and time.monotonic() < deadline, background.communicate()[0]
            time.sleep(0.5)
        start = time.monotonic()
        foreground = tune_cli("--name", "foreground", *RAY_TRAIN, storage=tmp_path / "results")
        out, _ = foreground.communicate(timeout=400)
        print(
            f"foreground sweep: exit {foreground.returncode} after {time.monotonic() - start:.0f} s "
            "with the background sweep running"
        )
        assert background.poll() is None, "the background sweep was still running throughout"
    finally:
        os.killpg(background.pid, signal.SIGINT)
        background_out, _ = background.communicate(timeout=120)
    assert foreground.returncode == 0, out[-4000:]
    assert ANOTHER_RAY not in out, out[-4000:]
    assert ANOTHER_RAY not in background_out, background_out[-4000:]
    (row,) = csv.DictReader((tmp_path / "results" / "foreground" / "summary.csv").open())
    assert row["status"] == "TERMINATED"
