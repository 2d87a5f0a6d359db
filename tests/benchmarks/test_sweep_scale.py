"""benchmarks/sweep_scale.py: its RSS sampler sees memory the driver takes (a control without
Ray), and ``--smoke`` runs as a user runs it: raylab against plain Tune, with the figures."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("_sweep_scale", ROOT / "benchmarks" / "sweep_scale.py")
sweep_scale = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sweep_scale)


def test_the_rss_sampler_sees_memory_the_driver_takes():
    """Positive control: 200 MiB touched while sampling shows as about that much growth."""
    with sweep_scale.RssSampler(every_s=0.01) as rss:
        held = bytearray(200 * 2**20)
        for i in range(0, len(held), 4096):
            held[i] = 1
    growth = float(re.search(r"growth ([+-]\d+) MB", rss.text()).group(1))
    assert 180 <= growth <= 260, rss.text()
    del held


@pytest.mark.slow
def test_the_smoke_run_prints_both_sweeps_the_ratio_and_the_timings():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sweep_scale.py"), "--smoke"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "20 trials, loggers off:" in out, out
    for label in ("plain Tune", "raylab    "):
        line = next(line for line in out.splitlines() if line.strip().startswith(label.strip()))
        assert re.search(r"ms/trial .* results/s  RSS start \d+ MB, peak \d+ MB", line), line
    ratio = float(re.search(r"ratio raylab / plain Tune: ([\d.]+)x", out).group(1))
    assert ratio > 0.5, out  # the figure itself is the benchmark's finding, not a test's
    assert re.search(r"summary\.csv from the finished run: [\d.]+ s; report: [\d.]+ s", out), out
