"""cluster/Dockerfile's install steps, played in a plain fresh venv here (no Docker daemon).

The steps are read from the Dockerfile itself (``dockerfile_steps.py``): its COPY lines copy
the build context into a stand-in folder, its RUN lines run with a fresh venv's ``pip`` and
``python`` first on PATH. The lock played is cpu-py311.txt (the Dockerfile's LOCK build
argument): gpu-py311.txt differs from it only in torch's build and torch's CUDA libraries
(test_lock_files.py checks that), about 3 GB that this machine without a GPU cannot use. pip
finds packages as this machine's pip configuration says (here a local wheel folder and PyPI
mirror, so the install runs offline; elsewhere PyPI and PIP_EXTRA_INDEX_URL=
https://download.pytorch.org/whl/cpu for torch's CPU build).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scenarios.clusters.dockerfile_steps import fresh_venv, run_steps, steps

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "cluster" / "Dockerfile"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)")


def lock_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = PIN.match(line)
        if m:
            pins[m[1].lower().replace("_", "-")] = m[2]
    return pins


def mismatches(pins: dict[str, str], installed: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Pins whose installed version differs (or that are missing): name -> (pinned, installed)."""
    return {n: (v, installed.get(n)) for n, v in pins.items() if installed.get(n) != v}


def installed_versions(python: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}))"
    )
    return json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout)


def test_dockerfile_base_is_the_image_gpu_yaml_runs():
    """One image: the Dockerfile builds on the tag gpu.yaml's docker block runs (pinned, not
    latest), and its default lock is the GPU lock, a file that exists."""
    base = next(arg for word, arg in steps(DOCKERFILE) if word == "FROM")
    gpu = yaml.safe_load((REPO / "cluster" / "gpu.yaml").read_text())
    assert base == gpu["docker"]["image"] and not base.endswith(":latest"), base
    lock = dict(a.partition("=")[::2] for w, a in steps(DOCKERFILE) if w == "ARG")["LOCK"]
    assert lock == "gpu-py311.txt" and (REPO / "cluster" / "lock" / lock).is_file()


def test_version_comparison_sees_a_planted_difference():
    """Control for the install test's comparison: a pin moved and a pin missing are reported."""
    pins = {"numpy": "2.4.6", "rdkit": "2025.9.1", "torch": "2.13.0+cpu"}
    installed = {"numpy": "2.4.6", "torch": "2.13.0+cpu", "other": "1"}
    assert mismatches(pins, installed) == {"rdkit": ("2025.9.1", None)}
    assert mismatches({**pins, "numpy": "2.4.5"}, {**installed, "rdkit": "2025.9.1"}) == {"numpy": ("2.4.5", "2.4.6")}


@pytest.mark.long
def test_dockerfile_install_steps_give_exactly_the_lock_in_a_fresh_venv(tmp_path):
    """Every RUN step of the Dockerfile succeeds in a fresh venv of this Python 3.11, and what
    the venv then holds is every package at the lock's version, raylab installed from the copied
    tree (a regular install, importable and runnable away from any checkout)."""
    venv = tmp_path / "venv"
    env = fresh_venv(venv, getattr(sys, "_base_executable", sys.executable))
    records = run_steps(DOCKERFILE, REPO, tmp_path / "image", env, {"LOCK": "cpu-py311.txt"}, timeout=1800)
    assert records and all(r["rc"] == 0 for r in records), records[-1]
    assert len(records) == sum(1 for w, _ in steps(DOCKERFILE) if w == "RUN")
    installed = installed_versions(venv / "bin" / "python")
    assert mismatches(lock_pins(REPO / "cluster" / "lock" / "cpu-py311.txt"), installed) == {}
    assert installed["raylab"] == "0.1.0" and installed["molsets"] == "0.3.1"
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import raylab; print(raylab.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(venv) in where, where  # the installed copy, not a checkout
