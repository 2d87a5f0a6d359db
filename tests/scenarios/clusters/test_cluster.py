"""Cluster files pass Ray's own autoscaler validation; a sweep spreads over two nodes."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

REPO = Path(__file__).resolve().parents[3]
CLUSTER_FILES = sorted((REPO / "cluster").glob("*.yaml"))


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_cluster_yaml_passes_ray_validation(path):
    config = yaml.safe_load(path.read_text())
    validate_config(prepare_config(copy.deepcopy(config)))
    first = path.read_text().splitlines()[0]
    assert first.startswith("# ") and f"ray up cluster/{path.name}" in first  # the command that brings it up


def _rsync_copy(source: Path, dest: Path, config: dict) -> set[str]:
    """Copy ``source`` the way ``ray up`` copies the ``~/raylab: .`` file mount: rsync with the
    filter and exclude arguments Ray's own SSH command runner builds from the YAML."""
    from ray.autoscaler._private.command_runner import SSHCommandRunner

    args = SSHCommandRunner._create_rsync_filter_args(
        None, {"rsync_exclude": config.get("rsync_exclude"), "rsync_filter": config.get("rsync_filter")}
    )
    subprocess.run(["rsync", "-avz", *args, "./", str(dest) + "/"], cwd=source, check=True, capture_output=True)
    return {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}


def _tracked(root: Path) -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True, text=True)
    return {line for line in out.stdout.splitlines() if (root / line).is_file()}


needs_rsync = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")


@needs_rsync
@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_rays_rsync_copies_every_tracked_file(path, tmp_path):
    """``git ls-files`` minus what Ray's rsync arguments copy to a node is empty."""
    config = yaml.safe_load(path.read_text())
    copied = _rsync_copy(REPO, tmp_path / "node", config)
    tracked = _tracked(REPO)
    assert tracked - copied == set()
    assert not any(p.startswith((".git/", ".venv/", "results/")) for p in copied)


@needs_rsync
def test_rsync_replay_sees_a_gitignore_negation_leave_a_package_behind(tmp_path):
    """Positive control: git's ``!raylab/data/`` negation, which rsync's dir-merge does not
    honour, leaves the tracked package behind in the same replay."""
    src = tmp_path / "src"
    for rel in _tracked(REPO):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    (src / ".gitignore").write_text("results/\ndata/\n!raylab/data/\n")
    config = yaml.safe_load((REPO / "cluster" / "gpu.yaml").read_text())
    left_behind = {p for p in _tracked(REPO) - _rsync_copy(src, tmp_path / "node", config)}
    # ``data/`` also matches tests/raylab/data/, which the negation does not re-include (for git either)
    assert any(p.startswith("raylab/data/") for p in left_behind), left_behind
    assert all(p.startswith(("raylab/data/", "tests/raylab/data/")) for p in left_behind), left_behind


def _check_lines(config: dict) -> list[str]:
    return [c for c in config["setup_commands"] if "python -c" in c]


def _run_on_this_python(line: str, home: Path, **env_changes: str | None) -> subprocess.CompletedProcess:
    """Run a setup line with this test's interpreter standing in for the node's: ``python`` on
    PATH (the image's) and ``~/venv`` (local.yaml's) both resolve to it."""
    home.mkdir(exist_ok=True)
    (home / "venv").symlink_to(sys.prefix)
    env = {**os.environ, "HOME": str(home), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for key, value in env_changes.items():
        env.pop(key, None) if value is None else env.__setitem__(key, value)
    return subprocess.run(["bash", "-c", line], cwd=home, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_setup_check_line_fails_where_raylab_data_is_a_folder(path, tmp_path):
    """Control: in a home whose checkout ``~/raylab`` has a ``data/`` folder (docs/cluster.md's data
    mount), an import-hook editable install (pip's default, as the Makefile installs) makes ``raylab.data`` that
    folder, a namespace package. The check line says so instead of passing; the YAMLs' compat
    install (a path entry) is what the loopback ``ray up`` runs to show the package wins."""
    lines = _check_lines(yaml.safe_load(path.read_text()))
    home = tmp_path / "home"
    (home / "raylab" / "data").mkdir(parents=True)
    proc = _run_on_this_python(lines[-1], home, PYTHONPATH=None)  # raylab from the Makefile's install only
    assert proc.returncode != 0 and "raylab.data is a folder, not the package" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_setup_check_line_passes_where_every_extra_is_installed(path, tmp_path):
    """The setup line that checks the extras import runs (and passes) on an interpreter with
    every extra installed; the same line naming a module no package provides fails."""
    lines = _check_lines(yaml.safe_load(path.read_text()))
    assert lines, f"{path.name} has no import check among its setup_commands"
    for i, line in enumerate(lines):
        proc = _run_on_this_python(line, tmp_path / f"ok{i}")
        assert proc.returncode == 0, proc.stderr[-2000:]
    control = lines[-1].replace("import ", "import raylab_no_such_module, ", 1)
    proc = _run_on_this_python(control, tmp_path / "control")
    assert proc.returncode != 0 and "raylab_no_such_module" in proc.stderr


def test_gpu_node_types_fail_setup_naming_the_node_where_no_gpu_is_seen(tmp_path):
    """On this machine (no GPU) each GPU node type's setup check fails with one line naming the
    node: first at nvidia-smi, and with a stand-in nvidia-smi that lists a GPU, at torch."""
    import socket

    config = yaml.safe_load((REPO / "cluster" / "gpu.yaml").read_text())
    gpu_types = {
        name: t for name, t in config["available_node_types"].items() if t.get("resources", {}).get("GPU", 0) > 0
    }
    assert gpu_types
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in'\n")
    (fake / "nvidia-smi").chmod(0o755)
    checks = {}
    for name, node_type in gpu_types.items():
        commands = node_type["worker_setup_commands"]
        # The node type's own list replaces the global one in Ray: it must hold every global line.
        assert commands[: len(config["setup_commands"])] == config["setup_commands"], name
        checks.setdefault(commands[-1], name)
    for check, name in checks.items():  # each distinct check line once
        for extra_path, says in (("", "nvidia-smi lists no GPU"), (f"{fake}{os.pathsep}", "torch sees no CUDA device")):
            env = {
                **os.environ,
                "PATH": f"{extra_path}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                "CUDA_VISIBLE_DEVICES": "",
            }
            proc = subprocess.run(["bash", "-c", check], env=env, capture_output=True, text=True, timeout=120)
            assert proc.returncode != 0, (name, proc.stdout)
            assert socket.gethostname() in proc.stderr and says in proc.stderr, (name, proc.stderr[-500:])


def test_validation_is_not_vacuous():
    config = yaml.safe_load((REPO / "cluster" / "gpu.yaml").read_text())
    config["max_wokers"] = 3
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(config))


@pytest.mark.slow
def test_sweep_runs_trials_on_both_nodes_of_a_two_node_cluster(tmp_path):
    script = REPO / "tests" / "scenarios" / "clusters" / "two_node_sweep.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["errors"] == 0 and report["trials"] == 2
    assert len(set(report["trial_nodes"])) == 2
    assert set(report["trial_nodes"]) == set(report["cluster_nodes"])


@pytest.mark.slow
@pytest.mark.long
def test_dashboard_flag_serves_on_localhost_and_prints_url(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raylab.tune",
            "toy",
            "--smoke",
            "--dashboard",
            "--quiet",
            "search.seed=[0]",
            "config.steps=400",
            "config.step_time_s=0.05",
            "--storage",
            str(tmp_path),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = None
    for line in proc.stderr:
        if line.startswith("Ray dashboard: "):
            url = line.split(": ", 1)[1].strip()
            break
    assert url and url.startswith("http://127.0.0.1:"), url
    deadline, status = time.monotonic() + 60, None
    while time.monotonic() < deadline and status is None:
        try:
            status = urllib.request.urlopen(f"{url}/", timeout=5).status  # the UI; its API needs a token
        except OSError:
            time.sleep(1)
    proc.communicate(timeout=300)
    assert status == 200 and proc.returncode == 0
