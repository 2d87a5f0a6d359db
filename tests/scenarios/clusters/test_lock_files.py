"""cluster/lock/: the two node locks agree, cover every extra nodes install, and the cluster
files' setup installs the lock that fits the node (GPU lock where nvidia-smi lists a GPU or the
image already has the GPU lock's torch; CPU lock elsewhere)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[3]
LOCKS = REPO / "cluster" / "lock"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)")
GPU_ONLY = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
NODE_EXTRAS = ["dqn_softlinf", "backdoor", "fair_adv", "boltz_distill", "seagram", "aws"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    return {norm(m[1]): m[2] for line in path.read_text().splitlines() if (m := PIN.match(line))}


def test_cpu_and_gpu_locks_pin_the_same_versions_but_torchs_build():
    cpu, gpu = pins(LOCKS / "cpu-py311.txt"), pins(LOCKS / "gpu-py311.txt")
    assert cpu["torch"] == "2.13.0+cpu" and gpu["torch"] == "2.13.0"
    gpu_only = {n for n in gpu if GPU_ONLY.match(n)} - {"torch"}
    assert gpu_only  # torch's CUDA libraries
    assert set(cpu) == set(gpu) - gpu_only
    assert {n: v for n, v in cpu.items() if n != "torch"} == {n: gpu[n] for n in cpu if n != "torch"}


def test_locks_cover_every_dependency_of_the_node_extras():
    """Every requirement of raylab and of each extra the nodes install is pinned, at a version
    its specifier allows (a lock made from a stale pyproject.toml fails here)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    extras = project["optional-dependencies"]
    for extra in NODE_EXTRAS:
        wanted += [Requirement(r) for r in extras[extra]]
    for lock in ("cpu-py311.txt", "gpu-py311.txt"):
        pinned = pins(LOCKS / lock)
        for req in wanted:
            if req.name == "raylab":  # an extra naming another extra of raylab's
                continue
            assert norm(req.name) in pinned, (lock, req.name)
            version = pinned[norm(req.name)]
            assert req.specifier.contains(version, prereleases=True), (lock, str(req), version)


def _setup_line(path: Path) -> str:
    (line,) = [c for c in yaml.safe_load(path.read_text())["setup_commands"] if "cluster/lock/" in c]
    return line


FAKE_PIP = """#!/bin/sh
if [ "$1" = freeze ]; then printf '%s\\n' "$FAKE_FREEZE"; exit 0; fi
echo "$@" >> "$PIP_LOG"
"""


@pytest.mark.parametrize(
    ("cluster", "gpu", "freeze", "lock"),
    [
        ("gpu.yaml", False, "torch==2.13.0+cpu", "cpu-py311.txt"),  # head, CPU node, stock image
        ("gpu.yaml", False, "", "cpu-py311.txt"),  # the stock image has no torch
        ("gpu.yaml", True, "", "gpu-py311.txt"),  # a GPU node type
        ("gpu.yaml", False, "torch==2.13.0", "gpu-py311.txt"),  # any node on raylab's image
        ("local.yaml", False, "", "cpu-py311.txt"),
        ("local.yaml", True, "", "gpu-py311.txt"),
    ],
)
def test_setup_installs_the_lock_that_fits_the_node(cluster, gpu, freeze, lock, tmp_path):
    """The setup line itself, run by bash with stand-ins for pip (recording what it is asked)
    and, on a GPU node, nvidia-smi; the CPU lock comes with PyTorch's CPU index, the GPU lock
    without it (with it, pip would pick 2.13.0+cpu for torch==2.13.0)."""
    bin_ = tmp_path / "bin"
    (tmp_path / "home" / "venv").mkdir(parents=True)
    os.symlink(bin_, tmp_path / "home" / "venv" / "bin")  # local.yaml's ~/venv/bin/pip
    bin_.mkdir()
    (bin_ / "pip").write_text(FAKE_PIP)
    if gpu:
        (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in'\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    log = tmp_path / "pip.log"
    env = {
        "PATH": f"{bin_}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "FAKE_FREEZE": freeze,
        "PIP_LOG": str(log),
    }
    proc = subprocess.run(["bash", "-c", _setup_line(REPO / "cluster" / cluster)], env=env, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    (call,) = log.read_text().splitlines()
    assert f"/raylab/cluster/lock/{lock}" in call and (LOCKS / lock).is_file()
    assert ("download.pytorch.org/whl/cpu" in call) == (lock == "cpu-py311.txt"), call


@pytest.mark.long
def test_gpu_lock_has_a_wheel_for_every_pin_on_pypi(tmp_path):
    """Every pin of the GPU lock, torch's CUDA build and its CUDA libraries included, has a wheel
    on PyPI for Linux x86_64 and CPython 3.11 (pip resolves the lock for that platform without
    installing: PyPI serves each wheel's metadata alone). Needs PyPI; about 25 s. This machine's
    pip configuration is left out: a wheel folder holding torch 2.13.0+cpu would satisfy
    torch==2.13.0 (a local version label matches a pin without one) and hide the CUDA build."""
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "-q"]
    command += ["--only-binary", ":all:", "--python-version", "3.11", "--implementation", "cp"]
    command += [arg for p in platforms for arg in ("--platform", p)]
    command += ["-r", str(LOCKS / "gpu-py311.txt"), "--report", str(report)]  # pip's default index
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    chosen = {
        norm(i["metadata"]["name"]): (i["metadata"]["version"], i["download_info"]["url"])
        for i in json.loads(report.read_text())["install"]
    }
    assert {n: v for n, (v, _) in chosen.items()} == pins(LOCKS / "gpu-py311.txt")
    torch_url = chosen["torch"][1]
    assert torch_url.startswith("https://") and "download.pytorch.org" not in torch_url, torch_url
    assert any(n.startswith("nvidia-cudnn") for n in chosen)
