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

from cluster.s3_store import keys

REPO = Path(__file__).resolve().parents[2]


def tune(*args: str, timeout: int = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raylab.tune", *args], cwd=REPO, capture_output=True, text=True,
        timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


@pytest.mark.slow
def test_sweep_checkpoints_and_reports_on_an_s3_compatible_store(s3_server, tmp_path):
    storage, client = s3_server
    proc = tune("toy", "--smoke", "--quiet", "--storage", storage, "--name", "s3run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "results: s3://raylab/runs/s3run?endpoint_override=" in proc.stdout

    stored = keys(client, "runs/s3run/")
    names = {k.rsplit("/", 1)[-1] for k in stored}
    assert {"experiment.yaml", "summary.csv", "config.yaml", "result.json"} <= names
    trials = {k.split("/")[2] for k in stored if k.endswith("/result.json")}
    assert len(trials) == 2  # the smoke sweep: seeds 0 and 1
    checkpoints = {k.split("/")[2] for k in stored if "/checkpoint_" in k}
    assert checkpoints == trials
    assert not any(k.startswith("s3run") or "endpoint_override" in k for k in keys(client))

    run_uri = storage.replace("runs?", "runs/s3run?")
    out = tmp_path / "report"
    report = subprocess.run(
        [sys.executable, "-m", "raylab.report", run_uri, "--out", str(out), "--format", "md"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert (out / "report.json").exists() and any(out.glob("*.md"))
