"""The device rehearsal (make device-rehearsal): the GPU check as the GPU machine would run it,
here, on the CPU, in a Python 3.12 venv with torch 2.11 from PyPI and no Ray.

Behind RAYLAB_DEVICE_TESTS=1 (and marked long): the first run downloads torch 2.11 with its
CUDA libraries (about 4 GB) and the kit (about 90 MB) from the registries; the venv is cached
outside the tree (benchmarks/device_rehearsal.py, ``RAYLAB_DEVICE_VENV``). What runs: the
Makefile target itself (the kit built, the venv checked, the kit resolved against the venv's
real packages, ``gpu_check.sh --rehearse`` unpacking the kit and running every step's CPU
twin), then the same check with a kit that lacks gymnasium, which must fail naming it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.long,
    pytest.mark.skipif(
        os.environ.get("RAYLAB_DEVICE_TESTS") != "1",
        reason="downloads torch 2.11 (about 4 GB) and runs for many minutes: RAYLAB_DEVICE_TESTS=1 runs it",
    ),
]
REPO = Path(__file__).resolve().parents[2]


def rehearse(tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """``make device-rehearsal`` in its own process group (all of it stopped if the test is)."""
    out = tmp_path / "rehearsal"
    argv = ["make", "-C", str(REPO), "device-rehearsal", f"PY={sys.executable}", "DEVICE_DEPS=", f"REHEARSAL_OUT={out}"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=3 * 3600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    table = json.loads((out / "gpu_check.json").read_text()) if (out / "gpu_check.json").is_file() else {}
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr), table


@pytest.mark.timeout(4 * 3600)  # about 35 minutes on 2 busy cores; the first run downloads torch too
def test_make_device_rehearsal_passes_every_step_or_skips_it_with_a_reason(tmp_path):
    done, table = rehearse(tmp_path)
    print(done.stdout[-6000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert (
        "rehearsal venv" in done.stdout and "the kit resolves offline against the venv's real packages" in done.stdout
    )
    steps = {s["name"]: s for s in table["steps"]}
    assert table["mode"] == "rehearse" and table["failed"] == 0
    for step in steps.values():
        assert step["ok"] is True or (step["ok"] is None and step["note"]), step
        assert "exit 2" not in step["note"] or step["name"] == "refuse_half_gpu_workers", step  # no preflight refused
    # every workload with the kit's packages ran its trial; boltz_distill alone is skipped (no RDKit)
    for workload in ("dqn_softlinf", "backdoor", "fair_adv", "seagram"):
        assert steps[f"cuda_trial_{workload}"]["ok"] is True, steps[f"cuda_trial_{workload}"]
    assert steps["cuda_trial_boltz_distill"]["ok"] is None and "RDKit" in steps["cuda_trial_boltz_distill"]["note"]
    assert steps["resume_gpu"]["ok"] is True and "bit-identical" in steps["resume_gpu"]["note"]
    # Ray saw the simulated GPU; the kit's modules all import
    assert table["probe"]["ray"] and table["probe"]["ray_resources"]["GPU"] == 1.0
    assert not {n: m for n, m in table["missing"].items() if n != "cuda_trial_boltz_distill"}
    out = tmp_path / "rehearsal"
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert {f"logs/{name}.log" for name, s in steps.items() if s["ok"] is not None} <= set(names)


@pytest.mark.timeout(1800)
def test_the_check_fails_naming_the_module_when_the_kit_lacks_one(tmp_path):
    """The kit without gymnasium's wheel, unpacked as gpu_check.sh does, run as a device call
    runs it ($OUT set, no OUT_DIR): the imports step FAILs naming the steps that import it,
    those steps are skipped with the reason, and $OUT holds the three files a call brings back."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import device_rehearsal

    kit = REPO / ".kit"
    assert (kit / "kit.json").is_file(), "run make device-rehearsal (or bash benchmarks/device_kit.sh) first"
    short = tmp_path / "kit"
    short.mkdir()
    for item in kit.iterdir():
        if not item.name.startswith("gymnasium-"):
            (short / item.name).symlink_to(item)
    py = str(device_rehearsal.DEFAULT_VENV / "bin" / "python")
    assert device_rehearsal.check_venv(py) is None
    out = tmp_path / "out"
    env = device_rehearsal.clean_env(PY=py, OUT=str(out), KIT=str(short), KIT_SITE=str(tmp_path / "site"))
    env.pop("OUT_DIR", None)
    done = subprocess.run(
        [
            "bash",
            str(REPO / "benchmarks" / "gpu_check.sh"),
            "--rehearse",
            "--only",
            "imports",
            "cuda_trial_dqn_softlinf",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    lines = done.stdout.splitlines()
    imports = next(line for line in lines if line.split()[1:2] == ["imports"])
    assert done.returncode == 1 and imports.startswith("FAIL"), done.stdout[-3000:]
    assert "cuda_trial_dqn_softlinf needs" in imports and "gymnasium (ModuleNotFoundError" in imports
    dqn = next(line for line in lines if line.split()[1:2] == ["cuda_trial_dqn_softlinf"])
    assert dqn.startswith("skip") and "gymnasium" in dqn
    table = json.loads((out / "gpu_check.json").read_text())
    assert "gymnasium" in table["missing"]["cuda_trial_dqn_softlinf"]
    assert "gymnasium" in table["missing"]["fig_dqn"]
    # what a device call brings back: three plain files in $OUT, each well under 16 MiB
    files = sorted(out.iterdir())
    assert [f.name for f in files] == ["gpu_check.json", "logs.tar.gz", "summary.txt"]
    assert all(f.is_file() and f.stat().st_size < 16 * 2**20 for f in files)
