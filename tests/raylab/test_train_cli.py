"""``python -m raylab.train`` as a user runs it: it says which variant it took and how to pick
another, prints short progress lines, writes no bare tensorboardX NaN warning, and
``raylab.report NAME`` then names ``--train-runs``."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raylab.launch import cli
from raylab.run_folder import TRAIN_TRIAL, RunFolder

ROOT = Path(__file__).resolve().parents[2]
TWO_VARIANTS = """\
description: toy with two variants
workload: toy
metric: eval/mse
mode: min
config: {steps: 40, report_every: 10}
search:
  variant: [{lr: 0.05}, {lr: 1.0e+6}]
resources: {workers: 1, cpus_per_worker: 1}
checkpoint: {every: 2, keep: 1}
"""


def command(module: str, *argv: str):
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The two-variant file trained once as given and once with ``--variant 2`` (its learning
    rate diverges: NaN metrics): ``(storage, path, first, second)``."""
    storage = tmp_path_factory.mktemp("train")
    path = storage / "two.yaml"
    path.write_text(TWO_VARIANTS)
    first = command("raylab.train", str(path), "--storage", str(storage / "runs"), "--name", "first")
    second = command("raylab.train", str(path), "--variant", "2", "--storage", str(storage / "runs"), "--name", "nan")
    return storage, path, first, second


def test_train_says_which_variant_it_took_and_how_to_pick_another(trained):
    storage, _, first, second = trained
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    assert "search.variant: using variant 1 of 2" in first.stderr and "--variant K: 2 {'lr': 1000000.0}" in first.stderr
    assert "using variant 2 of 2" in second.stderr
    params = RunFolder(storage / "runs" / "nan").trial(TRAIN_TRIAL).params()
    assert params["lr"] == 1e6


def test_train_progress_lines_are_short_and_no_bare_nan_warning_is_printed(trained):
    _, _, first, second = trained
    lines = [line for line in (first.stderr + second.stderr).splitlines() if line.startswith("[")]
    assert lines and max(map(len, lines)) < 200, max(lines, key=len)
    assert all("eval/mse" in line for line in lines)
    assert "NaN or Inf found in input tensor." not in second.stderr + second.stdout


def test_report_of_an_experiment_with_only_train_runs_names_train_runs(trained):
    storage, path, _, _ = trained
    done = command("raylab.report", path.stem, "--storage", str(storage / "runs"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--train-runs" in done.stderr, done.stderr


def test_tensorboardx_nan_warnings_of_a_sweep_are_labelled(caplog):
    import numpy as np
    from tensorboardX import x2num

    cli.quiet_third_party_warnings()
    with caplog.at_level(logging.WARNING, logger="tensorboardX.x2num"):
        x2num.make_np(math.nan)
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("TensorBoard events (tensorboardX): a metric is NaN or infinite")
    assert np.isnan(x2num.make_np(math.nan))


def test_a_row_of_sixty_metrics_makes_one_short_console_line():
    from raylab import session

    row = {f"early/loss_{i}": 0.123456 * i for i in range(60)} | {"train/loss": 0.5, "eval/asr": math.nan}
    line = session.progress_text(row, stop={}, metric="eval/asr")
    assert line.startswith("eval/asr - | train/loss 0.5") and line.endswith("+58 more in progress.csv")
    assert len(line) < 200
