"""``python -m raylab.tune ... --report``, and a report of the same sweep while it still runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raylab import report
from raylab.run_folder import RunFolder

REPO = Path(__file__).resolve().parents[3]
STEPS = 200


def reported_steps(run: Path) -> dict[str, list[int]]:
    return {trial.name: [row["train/step"] for row in trial.rows()] for trial in RunFolder(run).trials()}


@pytest.mark.slow
def test_tune_report_flag_and_a_report_of_the_running_sweep(tmp_path, ray_session):
    storage, run = tmp_path / "results", tmp_path / "results" / "run"
    release = tmp_path / "release"
    address = ray_session.get_runtime_context().gcs_address
    # The CLI joins the session's Ray; its trials are held after their report at step 100 (of
    # 200) until the partial report is written.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raylab.tune",
            "toy",
            "--smoke",
            "--report",
            "--quiet",
            "--storage",
            str(storage),
            "--name",
            "run",
            f"config.steps={STEPS}",
            "config.hold_at_step=100",
            f"config.release_file={release}",
            "search.seed=[0,1]",
            "--address",
            address,
            "--shared-storage",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline, partial = time.monotonic() + 240, None
        while time.monotonic() < deadline and partial is None:
            steps = reported_steps(run)
            if any(s and s[-1] == 100 for s in steps.values()) and (run / "experiment.yaml").is_file():
                partial = Path(report.write_report(str(run), out=tmp_path / "partial"))
                release.touch()
            else:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.2)
        assert partial is not None, "the sweep never got to a partial state"
        out, err = proc.communicate(timeout=300)
    finally:
        release.touch()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]

    # mid-sweep: a report of what was there, not all of it
    mid = json.loads((partial.parent / "report.json").read_text())
    assert mid["status_counts"] != {"TERMINATED": 2}
    mid_reports = {row[0]: row[mid["trial_columns"].index("reports")] for row in mid["trial_rows"]}
    assert min(mid_reports.values()) < STEPS // 20  # at least one trial had not reported everything

    # the end of the sweep: the summary names the report, which has every trial's full results
    lines = out.strip().splitlines()
    final = run / "report" / "report.html"
    assert f"summary: {run / 'summary.csv'}" in lines and lines[-1] == f"report: {final}"
    done = json.loads((final.parent / "report.json").read_text())
    assert done["status_counts"] == {"TERMINATED": 2} and done["notes"] == []
    assert all(row[done["trial_columns"].index("reports")] == STEPS // 20 for row in done["trial_rows"])
    assert done["tables"][0]["blocks"][0]["rows"][0]["cells"][0]["n"] == 2
