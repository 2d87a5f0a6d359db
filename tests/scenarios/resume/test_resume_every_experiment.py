"""Every experiment in tune_configs/: its smoke sweep, interrupted, continues with exactly the
command the CLI printed, and ends where an uninterrupted run ends.

To stay cheap, each sweep is cut to its first grid point (variant groups kept: the variant
search is what a saved experiment used to break on) and three reports per trial
(``stop.training_iteration=3``, a checkpoint at each). The CLI joins the test session's Ray
(``--address``) instead of starting its own; the uninterrupted run goes through the same
``raylab.launch.sweep``, in this process. Final metrics are compared bit for bit where the workload
promises an exact resume on CPU (its docs page says so); elsewhere (Atari emulators cannot be
saved; the others make no promise) the resumed run must finish every trial with the sweep
metric reported and finite.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raylab import experiment as experiments
from raylab import search_space, workloads
from raylab.launch import sweep
from raylab.run_folder import RunFolder

REPO = Path(__file__).resolve().parents[3]
# Run by default, one experiment of most workloads: fair_adv and backdoor_theory (compared bit
# for bit), boltz_distill and seagram by SIGINT, and the variant sweep (dqn_softlinf, the one
# whose saved experiment used to fail validation) by SIGKILL; toy's resume is tested more closely
# in test_sweep_resume.py. RAYLAB_RESUME_EVERY_EXPERIMENT=1 runs every file in tune_configs/ by
# SIGINT (about 45 s each on two cores; each of the 19 cases has passed here).
EVERY = os.environ.get("RAYLAB_RESUME_EVERY_EXPERIMENT") == "1"
EXPERIMENTS = sorted(experiments.available()) if EVERY else ["backdoor_theory", "boltz_distill", "fair_adv", "seagram"]
EXACT_RESUME = {"toy", "backdoor", "backdoor_theory", "fair_adv"}  # workloads promising it
NOT_COMPARED = ("perf/", "time", "timestamp")
# Experiments whose three smoke reports take well under a second are slowed, so that the
# interrupt lands mid-sweep: toy by a pause per step, the others by more work per report (a
# few seconds each here).
SLOWER = {
    "toy": ["config.step_time_s=0.05"],
    "backdoor_theory": ["config.steps=9000", "config.report_every=3000"],
    "boltz_distill": ["config.epochs=30", "config.report_every=100"],
    "dqn_softlinf_small": ["config.total_steps=15000", "stop.env/steps=15000", "config.report_every=5000"],
    # Atari emulators restart their episodes on resume: at the smoke's 300-step episodes none ends
    # in the one report after it, so its sweep metric (episode/return_mean) is missing there
    "dqn_softlinf_sticky": ["config.max_episode_frames=400"],
    "fair_adv_tri": ["config.epochs=3", "stop.train/epoch=3", "config.train_steps=10"],
    "seagram": ["config.victim_steps=3000", "config.report_every=1000"],
    "seagram_no_labels": ["config.victim_steps=3000", "config.report_every=1000"],
}
# Workloads whose sweep metric comes only at the end of a trial, after the three reports kept
# here (seagram scores its attack after training its victim): their rows carry it as NaN.
METRIC_AT_END = {"seagram"}
# backdoor withholds ASR (its sweep metric) below a clean-accuracy floor; the full-width smokes
# cut to three reports stay at chance, and resume is compared on every value, ASR included.
FLOOR_OFF = {"backdoor": ["config.clean_acc_floor_x_chance=0"]}


def short_overrides(name: str) -> list[str]:
    """The smoke sweep cut to one point of each grid (variants kept) and three reports."""
    exp = experiments.load(name, smoke=True)
    pins = [
        f"config.{key}={json.dumps(args[0])}"
        for key, spec in exp.search.items()
        if key != search_space.VARIANT
        for kind, args in spec.items()
        if kind in ("grid", "choice")
    ]
    return [
        *pins,
        "stop.training_iteration=3",
        "checkpoint.every=1",
        *SLOWER.get(name, []),
        *FLOOR_OFF.get(exp.workload, []),
    ]


def last_rows(run: Path) -> dict[str, dict]:
    """Each trial's last reported row, keyed by its config (trial ids differ between runs)."""
    rows = {}
    for trial in RunFolder(run).trials():
        lines = trial.rows()
        if lines:
            rows[json.dumps(lines[-1]["config"], sort_keys=True, default=str)] = lines[-1]
    return rows


def reported(run: Path) -> int:
    return sum(len(trial.rows()) for trial in RunFolder(run).trials())


def tune_cli(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "raylab.tune", *args],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


@pytest.mark.slow
# The default run keeps fair_adv (about 50 s); the others (50-85 s each) are marked ``long``.
@pytest.mark.parametrize(
    "name,sig",
    [
        pytest.param(n, sig, marks=[] if n == "fair_adv" else [pytest.mark.long])
        for n, sig in [(n, signal.SIGINT) for n in EXPERIMENTS] + [("dqn_softlinf", signal.SIGKILL)]
    ],
)
def test_interrupted_smoke_sweep_resumes_with_the_printed_command(name, sig, ray_session, tmp_path):
    storage = tmp_path / "results"
    address = ray_session.get_runtime_context().gcs_address
    overrides = short_overrides(name)
    proc = tune_cli(
        [
            name,
            "--smoke",
            *overrides,
            "--storage",
            str(storage),
            "--name",
            "run",
            "--address",
            address,
            "--shared-storage",
            "--quiet",
        ]
    )
    deadline = time.monotonic() + 240
    while reported(storage / "run") == 0:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no trial reported within 4 minutes"
        time.sleep(0.2)
    if sig == signal.SIGKILL:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        command = (
            f"python -m raylab.tune {name} --resume --name run --storage {storage} --address {address} --shared-storage"
        )
    else:
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=180)
        if proc.returncode == 0:
            pytest.fail(f"{name}: the sweep finished before the interrupt took effect")
        assert proc.returncode == 130, err[-3000:]
        assert "Tuner.restore" not in out + err  # one resume hint: raylab's
        lines = err.splitlines()
        command = lines[lines.index(next(line for line in lines if line.endswith("continue it with:"))) + 1].strip()
        assert "--smoke" not in command  # the run folder remembers
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "raylab.tune"]
    resumed = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, text=True, capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, text=True, capture_output=True, timeout=120)
    assert again.returncode == 0 and "run has finished" in again.stdout, again.stderr[-2000:]

    exp = experiments.load(name, overrides, smoke=True)
    resumed_rows = last_rows(storage / "run")
    assert resumed_rows and all(1 <= row["training_iteration"] <= 3 for row in resumed_rows.values())
    for row in resumed_rows.values():
        assert isinstance(row.get(exp.metric), (int, float)), row
        assert math.isfinite(row[exp.metric]) or exp.workload in METRIC_AT_END, row
    if exp.workload not in EXACT_RESUME:
        return
    sweep.run(exp, RunFolder.under(str(storage), "whole"), verbose=0)
    whole_rows = last_rows(storage / "whole")
    assert whole_rows.keys() == resumed_rows.keys()
    declared = workloads.get(exp.workload).metrics
    for key, whole in whole_rows.items():
        compared = {
            m: whole[m]
            for m in (*declared, "training_iteration")
            if m in whole and not m.startswith(NOT_COMPARED) and "per_s" not in m
        }
        assert compared and compared == {m: resumed_rows[key].get(m) for m in compared}, name
