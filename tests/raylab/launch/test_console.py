"""The sweep's console without --verbose: raylab's lines only, a failure in one line with its
error.txt, restarts counted, a status line with counts and an ETA."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from raylab import experiment as experiments
from raylab import yaml_io
from raylab.launch import progress
from raylab.run_folder import ERROR_FILE

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_a_failing_trial_is_one_line_with_its_exception_and_error_txt_and_restarts_are_counted(tmp_path):
    exp = tmp_path / "failing.yaml"
    exp.write_text(
        "workload: toy_failing\nmetric: train/loss\nmode: min\n"
        "config: {steps: 60, report_every: 20}\nsearch: {seed: [0]}\n"
        "checkpoint: {every: 1, keep: 2}\nfailure: {max_failures: 1}\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests/raylab/launch/failing_sweep.py"),
            str(exp),
            "--storage",
            str(tmp_path / "results"),
            "--name",
            "failing",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=400,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
    )
    console = done.stdout + done.stderr
    print(console)
    assert done.returncode == 1
    assert "Traceback" not in console and "(pid=" not in console
    run = tmp_path / "results" / "failing"
    failed = [line for line in console.splitlines() if re.match(r"\[\s*\d+s\] \S+ failed: ", line)]
    assert len(failed) == 2, failed
    for attempt, line in enumerate(failed, start=1):
        assert f"RuntimeError: injected failure on attempt {attempt} ({ERROR_FILE}: {run}/" in line, line
        path = re.search(r"error\.txt: (\S+?error\.txt)", line).group(1)
        assert f"injected failure on attempt {attempt}" in Path(path).read_text()
    assert failed[0].endswith("; restarting (1 of 1)") and "restarting" not in failed[1]
    # the end-of-sweep table says why the trial failed: its own code, not a lost node
    header = next(line for line in done.stdout.splitlines() if line.startswith("trial "))
    assert "failed by" in header
    assert re.search(r"ERROR .* code error", done.stdout), done.stdout[-2000:]
    # The run records where it came from, and summary.csv every reported metric's last value.
    saved = yaml_io.load(run / "experiment.yaml")["provenance"]
    assert len(saved["git"]["commit"]) == 40 and isinstance(saved["git"]["dirty"], bool)
    assert {"raylab", "ray", "torch"} <= set(saved["versions"]) and saved["host"]
    assert saved["started"] <= saved["ended"]
    from raylab import report
    from raylab.report import run_view as report_data

    facts = dict(report._facts(report_data.load_run(str(run))))  # the report's facts box
    assert facts["code"].startswith(saved["git"]["commit"][:12]) and facts["host"] == saved["host"]
    assert f"ray {saved['versions']['ray']}" in facts["versions"] and facts["ended"] == saved["ended"]
    (row,) = csv.DictReader((run / "summary.csv").open())
    assert row["train/loss (last)"] == "1.0" and row["train/step (last)"] == "2" and row["eval/mse (last)"] == ""


def _trials(*statuses):
    return [SimpleNamespace(status=s) for s in statuses]


def test_status_line_every_interval_with_counts_and_an_eta_and_the_clock_restarts_on_resume():
    assert progress.status_line(["TERMINATED", "ERROR", "RUNNING", "PENDING", "PENDING", "PAUSED"], 120.0) == (
        "2 done, 1 running, 3 pending; ETA 4 min"
    )  # 60 s a finished trial, 4 to go
    assert (
        progress.status_line(["RUNNING", "PENDING"], 30.0)
        == "0 done, 1 running, 1 pending; ETA once a trial reports progress toward its stop criterion or finishes"
    )
    now = [1000.0]
    lines = []
    stream = SimpleNamespace(write=lines.append, flush=lambda: None)
    callback = progress.callback(
        experiments.load("toy", smoke=True), stream=stream, status_every_s=60, clock=lambda: now[0]
    )
    callback.setup()
    for t in (10, 59, 61, 100, 122):
        now[0] = 1000.0 + t
        callback.on_step_end(iteration=0, trials=_trials("TERMINATED", "RUNNING"))
    printed = [text for text in lines if text.strip()]
    assert printed == [
        "[    61s] 1 done, 1 running, 0 pending; ETA 61 s",
        "[   122s] 1 done, 1 running, 0 pending; ETA 2 min",
    ]
    now[0] = 5000.0  # the sweep is resumed later: its clock starts again
    callback.setup()
    callback.on_trial_start(iteration=0, trials=[], trial=SimpleNamespace(trial_id="t1"))
    assert lines[-2] == "[     0s] t1 started"


def test_error_line_holds_the_last_line_of_the_exception():
    text = "Failure # 1\nTraceback (most recent call last):\n  File x\nValueError: bad lr\n\n"
    where = f"/r/t1/{ERROR_FILE}"
    assert progress.error_line("t1", text, where) == f"t1 failed: ValueError: bad lr ({ERROR_FILE}: {where})"
