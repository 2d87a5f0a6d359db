"""An interrupted sweep (SIGINT, or SIGKILL of the whole process group) finishes with --resume."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raylab.run_folder import RunFolder, TrialFolder

REPO = Path(__file__).resolve().parents[3]
TWO_WORKERS = ["resources.workers=2", "resources.cpus_per_worker=0.5"]  # two trials at once on 2 CPUs
# By default two of the four (path, signal) cases run: Tune trials stopped by SIGINT, with the CLI
# joining the test session's Ray, and Ray Train trials whose CLI is killed together with the local
# Ray it started. RAYLAB_RESUME_EVERY_EXPERIMENT=1 runs all four.
EVERY_CASE = os.environ.get("RAYLAB_RESUME_EVERY_EXPERIMENT") == "1"
CASES = [
    pytest.param(
        resources,
        sig,
        id=f"{path}-{sig_id}",
        marks=[pytest.mark.long] if (path, sig_id) == ("ray_train", "sigkill") else [],
    )
    for path, resources in (("tune", []), ("ray_train", TWO_WORKERS))
    for sig, sig_id in ((signal.SIGINT, "sigint"), (signal.SIGKILL, "sigkill"))
    if EVERY_CASE or (path, sig_id) in (("tune", "sigint"), ("ray_train", "sigkill"))
]
"""Ray Train with SIGKILL (about 130 s) is marked ``long``: RAYLAB_LONG_TESTS=1 runs it."""


def steps_reported(trial: TrialFolder) -> list[int]:
    return [row["train/step"] for row in trial.rows()]


def tune_cli(*args: str, storage: Path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--quiet", "--storage", str(storage), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


@pytest.mark.slow
@pytest.mark.parametrize("resources, sig", CASES)
def test_interrupted_sweep_resumes_without_rerunning_finished_trials(tmp_path, sig, resources, request):
    storage, run = tmp_path / "results", tmp_path / "results" / "run"
    release = tmp_path / "release"
    # The CLI starts its own Ray where the whole process group is killed (that Ray goes with it);
    # otherwise it joins the session's.
    joined = []
    if sig != signal.SIGKILL:
        address = request.getfixturevalue("ray_session").get_runtime_context().gcs_address
        joined = ["--address", address, "--shared-storage"]
    # One short trial (40 steps) that finishes before the interrupt, one long one (400 steps)
    # held after its report at step 100 (its last checkpoint: step 80) until the resume.
    proc = tune_cli(
        "--name",
        "run",
        "search.steps=[40,400]",
        "search.seed=[0]",
        "config.hold_at_step=100",
        f"config.release_file={release}",
        *resources,
        *joined,
        storage=storage,
    )
    short = long = None
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        trials = {t: steps_reported(t) for t in RunFolder(run).trials()}
        short = next((p for p, s in trials.items() if s and s[-1] == 40), None)
        long = next((p for p, s in trials.items() if s and s[-1] == 100), None)  # held there
        if short and long and long.checkpoints():
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    else:
        pytest.fail("the sweep never reached the point to interrupt")
    if sig == signal.SIGKILL:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the local Ray it started
        proc.wait(timeout=60)
    else:
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "--resume --name run" in err
    steps_before = steps_reported(long)
    assert steps_before[-1] == 100

    release.touch()
    resumed = tune_cli("--resume", "--name", "run", *joined, storage=storage)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out[-2000:] + err[-3000:]

    assert steps_reported(short) == [20, 40]  # finished trial not run again
    steps = steps_reported(long)
    assert steps[: len(steps_before)] == steps_before and steps[-1] == 400
    after = steps[len(steps_before) :]
    # Continued from its last checkpoint (not from step 0): only steps since then run again.
    assert 20 < after[0] <= steps_before[-1] + 20 and after == list(range(after[0], 401, 20))
    rows = list(csv.DictReader((run / "summary.csv").open()))
    assert len(rows) == 2 and {r["status"] for r in rows} == {"TERMINATED"}


@pytest.mark.slow
def test_a_stale_ray_address_file_does_not_capture_a_local_sweep(tmp_path):
    """`ray start` records its cluster in Ray's temp folder; a killed cluster leaves the file
    behind. Without --address raylab starts its own Ray rather than dialling that address."""
    import tempfile

    ray_tmp = Path(tempfile.mkdtemp(prefix="rlstale-", dir="/tmp"))  # short: Ray's socket paths
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9\n")  # nothing listens
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = tune_cli(
        "--name",
        "run",
        "search.steps=[5]",
        "search.seed=[0]",
        storage=tmp_path / "results",
        env={**env, "RAY_TMPDIR": str(ray_tmp)},
    )
    try:
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, err[-3000:]
    from raylab.run_folder import FINISHED_FILE

    assert (tmp_path / "results" / "run" / FINISHED_FILE).exists()
