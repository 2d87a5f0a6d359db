"""benchmarks/gpu_check.sh on a machine without a GPU: it stops at once, and its steps fit 480 s.

What runs here: the shell script and its Python runner up to the "no GPU" line (a stub
``nvidia-smi`` on PATH, CUDA hidden), the step runner with steps replaced, its time limits,
and the two-rank gloo DDP step on CPU tensors. What needs a GPU (the trials, NCCL, the
figures) runs only there.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

LONG = pytest.mark.skipif(os.environ.get("RAYLAB_DEVICE_TESTS") != "1",
                          reason="long (minutes, or the network): RAYLAB_DEVICE_TESTS=1 runs it")
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"


def load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_nvidia_smi(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "nvidia-smi"
    stub.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771 MiB, 580.159.03'\n")
    stub.chmod(0o755)
    return bin_dir


def check_sh(tmp_path, path: str, **env) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120, env={
        **os.environ, "PATH": path, "PY": sys.executable, "OUT_DIR": str(tmp_path / "out"), **env})
    return done, time.monotonic() - start


def test_with_nvidia_smi_but_no_cuda_it_stops_at_once_with_one_line(tmp_path, fake_nvidia_smi):
    path = f"{fake_nvidia_smi}:{os.environ['PATH']}"
    # positive control: without the stub the first check (nvidia-smi) is what stops it
    bare = [p for p in os.environ["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists()]
    control, _ = check_sh(tmp_path, ":".join(bare))
    assert control.returncode == 2 and control.stdout.strip() == "no nvidia-smi: this check needs an NVIDIA GPU"
    done, seconds = check_sh(tmp_path, path, CUDA_VISIBLE_DEVICES="")
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith("torch sees no CUDA GPU"), lines
    assert not (tmp_path / "out").exists()  # no step ran, nothing unpacked
    print(f"stopped in {seconds:.1f} s: {lines[0]}")
    # the Python runner says the same on its own
    direct = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path / "o2")],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PATH": path, "CUDA_VISIBLE_DEVICES": ""})
    assert direct.returncode == 2 and direct.stdout.strip().startswith("torch sees no CUDA GPU"), direct.stdout


def test_step_limits_add_up_to_at_most_480_s_and_cover_every_workload():
    from raylab import workloads

    check = load_check()
    assert sum(check.STEPS.values()) <= check.BUDGET_S == 480, check.STEPS
    # every workload package (one folder of trainers/, whatever loops it registers) but toy
    paper = {w.loop.split(".")[1] for w in workloads.registry().values()} - {"toy"}
    assert {f"cuda_trial_{w}" for w in paper} <= set(check.STEPS), sorted(check.STEPS)
    for step in ("two_trials_one_gpu", "amp_trial", "resume_gpu", "nccl_world1", "ddp_gloo_1gpu",
                 "refuse_half_gpu_workers"):
        assert step in check.STEPS
    print(f"step limits: {sum(check.STEPS.values())} s over {len(check.STEPS)} steps")


def test_the_runner_prints_one_line_per_step_and_the_figures_last(tmp_path, monkeypatch, capsys):
    check = load_check()
    monkeypatch.setattr(check, "preflight", lambda py: None)
    monkeypatch.setattr(check, "STEPS", {"passes": 5, "fails": 5, "skips": 5, "hangs": 2})
    monkeypatch.setattr(check.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "GPU X\n", ""))

    def step(self, name, log, limit):
        if name == "passes":
            self.figures.append("figure: 1 images/s")
            return "fine"
        if name == "fails":
            raise check.StepFailed("exit 1")
        if name == "skips":
            raise check.Skip("rdkit not importable")
        return check.run([sys.executable, "-c", "import time; time.sleep(60)"], log, limit)

    monkeypatch.setattr(check.Check, "step", step)
    start = time.monotonic()
    failed = check.main(["--out", str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert failed == 2 and time.monotonic() - start < 30
    words = [line.split()[0] + " " + line.split()[1] for line in lines[1:5]]
    assert words == ["ok passes", "FAIL fails", "skip skips", "FAIL hangs"], lines
    assert "timed out after 2 s" in lines[4]
    assert lines[-3:] == ["figures (same GPU, same run):", "  figure: 1 images/s",
                          f"failed steps: 2 (logs in {tmp_path})"]


@LONG  # two spawned torch processes: about 35 s on two busy cores
@pytest.mark.slow
def test_the_ddp_gloo_step_averages_gradients_across_two_ranks_on_cpu(tmp_path):
    check = load_check()
    script = tmp_path / "ddp.py"
    script.write_text(check.DDP_GLOO_1GPU)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GPU_CHECK_DEVICE": "cpu", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gradients averaged across ranks" in done.stdout
