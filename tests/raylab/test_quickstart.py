"""The Quickstart on a 2-core laptop: the dry runs a newcomer is shown exit 0 without an
``error:`` line, a refusal names what runs here instead (the CPU claim experiment, --smoke,
--cluster) and a storage hint that fits, and the printed TensorBoard command runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raylab import experiment as experiments
from raylab.errors import UserError
from raylab.launch import checks, cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flags", [["--smoke"], ["--cluster", "cluster/gpu.yaml"]])
def test_the_quickstart_dry_runs_exit_0_without_an_error_line(flags, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "raylab.tune", "dqn_softlinf", "--dry-run", *flags, "--storage", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "error:" not in done.stdout + done.stderr
    assert "# wall time:" in done.stdout or "wall time at the cap" in done.stdout


def test_a_gpu_sweep_refused_on_a_laptop_names_the_cpu_claim_experiment_and_the_cluster_plan():
    with pytest.raises(UserError) as refused:
        checks.check_resources(experiments.load("dqn_softlinf"), {"CPU": 2.0, "GPU": 0.0}, local=True)
    message = str(refused.value)
    assert "dqn_softlinf_small" in message and "--smoke" in message and "--cluster cluster/gpu.yaml" in message


def test_the_storage_hint_says_what_fits_or_how_much_one_checkpoint_per_trial_needs():
    need = checks.CheckpointNeed(trials=420, kept=2, checkpoint_bytes=7e9)
    too_small = checks.storage_hint(need, free=78e9)
    assert "even checkpoint.keep=1 needs 2.9 TB" in too_small and "--cluster" in too_small
    assert checks.storage_hint(need, free=3e12).startswith("checkpoint.keep=1 fits (2.9 TB)")
    assert checks.storage_hint(checks.CheckpointNeed(trials=10, kept=None, checkpoint_bytes=1e9), 35e9).startswith(
        "checkpoint.keep=3 fits"
    )


def test_the_printed_tensorboard_command_runs_here():
    line = cli.tensorboard_text("results/run")
    command = line.split("TensorBoard: ", 1)[1].split()[0]
    assert command == "tensorboard" and "not installed" not in line
    done = subprocess.run([Path(sys.executable).parent / command, "--version"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_without_tensorboard_the_printed_line_says_how_to_get_it(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "pip install tensorboard" in cli.tensorboard_text("results/run")
