"""benchmarks/adv_throughput.py (the device check's fig_pgd) on a CPU: every method timed at fp32/NCHW
and at fair_adv's CUDA defaults (bf16 autocast, channels_last) side by side, each with its seconds
per CIFAR-10 epoch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_both_precisions_are_timed_side_by_side():
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "adv_throughput.py"),
            *("--device", "cpu", "--model", "small_cnn", "--batch-size", "4", "--rounds", "1", "--warmup", "0"),
            *("--threads", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    for label in ("fp32/NCHW", "bf16/NHWC"):
        rows = [line for line in lines if line.startswith(f"{label}: ")]
        assert [r.split()[1] for r in rows[1:5]] == ["standard", "pgd_at", "trades", "tri_regime"], lines
        assert "s per CIFAR-10 epoch (50,000 images)" in rows[-1] and "PGD-10 AT costs" in rows[-1]
