"""A sweep with ``--storage s3://...?endpoint_override=...`` against an S3 server on 127.0.0.1.

Run as a user runs it (``python -m raylab.tune`` in its own process, which starts its own
Ray): checkpoints, results and raylab's files land in the bucket, and ``raylab.report`` reads
the run from there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from scenarios.clusters.s3_store import checkpoint_names, checkpoint_writes, keys, result_rows

from raylab.run_folder import CHECKPOINT_PREFIX, CONFIG_FILE, RESULT_FILE

REPO = Path(__file__).resolve().parents[3]


def tune(*args: str, timeout: int = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raylab.tune", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


@pytest.mark.slow
def test_sweep_checkpoints_and_reports_on_an_s3_compatible_store(s3_server, tmp_path):
    storage, client = s3_server
    proc = tune("toy", "--smoke", "--quiet", "--storage", storage, "--name", "s3run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "results: s3://raylab/runs/s3run?endpoint_override=" in proc.stdout

    stored = keys(client, "runs/s3run/")
    names = {k.rsplit("/", 1)[-1] for k in stored}
    assert {"experiment.yaml", "summary.csv", CONFIG_FILE, RESULT_FILE} <= names
    trials = {k.split("/")[2] for k in stored if k.endswith(f"/{RESULT_FILE}")}
    assert len(trials) == 2  # the smoke sweep: seeds 0 and 1
    checkpoints = {k.split("/")[2] for k in stored if f"/{CHECKPOINT_PREFIX}" in k}
    assert checkpoints == trials
    assert not any(k.startswith("s3run") or "endpoint_override" in k for k in keys(client))

    run_uri = storage.replace("runs?", "runs/s3run?")
    out = tmp_path / "report"
    report = subprocess.run(
        [sys.executable, "-m", "raylab.report", run_uri, "--out", str(out), "--format", "md"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert (out / "report.json").exists() and any(out.glob("*.md"))


@pytest.mark.slow
@pytest.mark.long
def test_a_two_worker_train_sweep_checkpoints_on_s3_and_reports_by_experiment_name(counting_s3_server, tmp_path):
    """The Ray Train path on the same store: its run folder (``_raylab/train/TRIAL``) is joined
    before the URI's query string, and the checkpoints end in the trial folder.

    Bytes per checkpoint: the Train worker PUTs each checkpoint once; Tune's copy
    into the trial folder is a server-side copy (pyarrow's ``copy_files`` between two paths of
    one S3 filesystem calls CopyObject), so no checkpoint byte passes the head, but the bucket
    holds the checkpoint twice until Ray Train's copy is deleted, and pays one more PUT request
    per file. docs/cluster.md's "S3" section states the cost.
    """
    storage, client, writes = counting_s3_server
    proc = tune(
        "toy",
        "--smoke",
        "--quiet",
        "--storage",
        storage,  # named toy-smoke-STAMP
        "search.seed=[0]",
        "resources.workers=2",
        "resources.cpus_per_worker=1",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = {k.split("/")[1] for k in keys(client, "runs/toy-smoke-")}
    stored = keys(client, f"runs/{run}/")
    (trial,) = {k.split("/")[2] for k in stored if k.endswith(f"/{RESULT_FILE}")}
    assert {k.split("/")[2] for k in stored if f"/{CHECKPOINT_PREFIX}" in k and "/_raylab/" not in k} == {trial}
    assert not [k for k in stored if "/_raylab/train/" in k and f"/{CHECKPOINT_PREFIX}" in k]  # moved
    assert result_rows(client, run)[-1]["train/step"] == 60

    w = checkpoint_writes(client, writes, run)
    print(
        f"checkpoint {w['size']} B x {w['count']}: body bytes PUT through Ray Train "
        f"{w['train_bytes']} B ({w['train_bytes'] / (w['count'] * w['size']):.3f}x), into the "
        f"trial folder {w['tune_bytes']} B; {len(w['copied'])} objects copied server-side"
    )
    assert w["count"] >= 2 and w["train_bytes"] == w["count"] * w["size"]  # PUT once: 1.0x
    assert w["tune_bytes"] == 0  # Tune's copy: server-side, nothing through the head
    assert {k.rsplit("/", 1)[0] for k in w["copied"]} == w["tune_folders"]
    assert len(w["copied"]) == w["count"] * w["files"]  # each file copied once in the bucket

    # An experiment name finds the newest run of it under an ``s3://...?query`` storage.
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "raylab.report",
            "toy",
            "--storage",
            storage,
            "--out",
            str(tmp_path / "report"),
            "--format",
            "md",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert run in (tmp_path / "report" / "report.md").read_text()


def s3_result_steps(client, run: str) -> list[int]:
    return [row["train/step"] for row in result_rows(client, run)]


@pytest.mark.slow
@pytest.mark.long
def test_an_interrupted_sweep_on_s3_resumes_from_a_fresh_process_with_the_printed_command(s3_server):
    import shlex
    import signal
    import time

    storage, client = s3_server
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raylab.tune",
            "toy",
            "--smoke",
            "--quiet",
            "--storage",
            storage,
            "--name",
            "s3int",
            "search.steps=[400]",
            "search.seed=[0]",
            "config.step_time_s=0.05",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # checkpoints go to the bucket as they are reported
        if len(checkpoint_names(client, "s3int")) >= 2:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("no checkpoint reached the bucket")
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    (printed,) = [line.strip() for line in err.splitlines() if "--resume --name s3int" in line]
    assert printed.startswith("python -m raylab.tune toy --resume --name s3int --storage ")
    before = s3_result_steps(client, "s3int")
    assert before and before[-1] < 400

    resumed = tune(*shlex.split(printed)[3:])  # exactly the printed command, in a new process
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = s3_result_steps(client, "s3int")
    assert steps[: len(before)] == before and steps[-1] == 400, (before, steps)
    after = steps[len(before) :]
    # Continued from a checkpoint in the bucket (not from step 0): only steps since it ran again.
    assert 20 < after[0] <= before[-1] + 20 and after == list(range(after[0], 401, 20)), steps

    again = tune(*shlex.split(printed)[3:])
    assert again.returncode == 0 and "has finished" in again.stdout, again.stdout + again.stderr[-2000:]
