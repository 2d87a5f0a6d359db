"""benchmarks/trial_paths.py: its process sampler sees what a process writes and holds (a control
without Ray), and the script run as a user runs it, at a tiny size, measures both trial paths."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("_trial_paths", ROOT / "benchmarks" / "trial_paths.py")
trial_paths = sys.modules.setdefault("_trial_paths", importlib.util.module_from_spec(spec))
spec.loader.exec_module(trial_paths)  # registered first: its dataclasses look their module up

CHILD = """
import sys, time
from pathlib import Path
held = bytearray(48 * 2**20)  # private memory, touched
for i in range(0, len(held), 4096):
    held[i] = 1
go, out = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    time.sleep(0.02)
with open(out, "wb") as f:
    for _ in range(8):
        f.write(b"x" * 2**20)
(out.parent / "written").touch()
while True:
    time.sleep(1)
"""


def test_the_sampler_sees_a_ray_process_write_and_hold_known_amounts(tmp_path):
    """Positive control: a child titled as a Ray actor holds 48 MiB and then writes 8 MiB."""
    go, out = tmp_path / "go", tmp_path / "out.bin"
    child = subprocess.Popen(["ray::FakeActor.run", "-c", CHILD, str(go), str(out)], executable=sys.executable)
    try:
        sampler = trial_paths.Sampler()
        deadline = time.monotonic() + 30
        while not sampler.seen.get(child.pid) or sampler.seen[child.pid].uss < 48 * 2**20:
            assert time.monotonic() < deadline, sampler.seen
            sampler.sample()
            time.sleep(0.05)
        go.touch()
        while not (tmp_path / "written").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sampler.sample()
    finally:
        child.kill()
        child.wait()
    seen = sampler.seen[child.pid]
    assert seen.title == "FakeActor"
    assert 8 * 2**20 <= seen.wchar_last - seen.wchar_first < 8.1 * 2**20
    assert 48 * 2**20 <= seen.uss <= seen.rss


def test_actor_class_names_the_class_whatever_the_method():
    assert trial_paths.actor_class("ray::TrainController.run") == "TrainController"
    assert trial_paths.actor_class("ray::ImplicitFunc.train") == "ImplicitFunc"
    assert trial_paths.actor_class("ray::IDLE") == "IDLE"


@pytest.mark.slow
@pytest.mark.long
def test_both_paths_at_a_tiny_size(tmp_path):
    """One single-GPU trial per path (fake GPUs): the trial sees its one GPU on both; the Ray
    Train trial keeps its driver and controller on the head and copies each checkpoint through
    it once, the Tune trial keeps nothing there. 91 s on 2 loaded cores."""
    report = tmp_path / "paths.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "trial_paths.py"), "--trials", "1", "--repeats", "1"]
        + ["--reports", "2", "--step-s", "0.3", "--state-mib", "4", "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ratio" in proc.stdout and "head memory per trial" in proc.stdout
    (train,), (tune,) = json.loads(report.read_text())["sweeps"].values()
    for sweep in (train, tune):
        assert sweep["ended"] == 1 and sweep["first_report_s"] > 0
        assert sweep["gpus_reserved"] == [1] and sweep["cuda_visible_devices"] == [1]
        assert sweep["loop_bytes_per_checkpoint_byte"] >= 0.95  # each checkpoint saved by the loop
    assert {"ImplicitFunc", "TrainController", "Mailbox"} <= set(train["head_classes"])
    assert train["head_uss_mib_per_trial"] > 100
    assert 0.95 <= train["head_bytes_per_checkpoint_byte"] < 1.5  # one copy of each through the head
    assert tune["head_classes"] == [] and tune["head_uss_mib_per_trial"] == 0
    assert tune["head_bytes_per_checkpoint_byte"] == 0
