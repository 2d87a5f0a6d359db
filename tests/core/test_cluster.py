"""Cluster files pass Ray's own autoscaler validation; a sweep spreads over two nodes."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

REPO = Path(__file__).resolve().parents[2]
CLUSTER_FILES = sorted((REPO / "cluster").glob("*.yaml"))


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_cluster_yaml_passes_ray_validation(path):
    config = yaml.safe_load(path.read_text())
    validate_config(prepare_config(copy.deepcopy(config)))
    assert path.read_text().startswith("# ray up cluster/")
    # The dashboard and Ray's ports stay private: the head binds the dashboard to localhost.
    head_start = " ".join(config["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head_start
    assert any("pip install" in c and "raylab" in c for c in config["setup_commands"])


def test_gpu_cluster_has_cpu_head_and_single_and_multi_gpu_types():
    config = yaml.safe_load((REPO / "cluster" / "gpu.yaml").read_text())
    types = config["available_node_types"]
    # No trial CPUs on the head; the trial_driver resource pins Ray Train drivers there.
    assert types[config["head_node_type"]]["resources"] == {"CPU": 0, "trial_driver": 1000}
    gpu_types = [t["node_config"]["InstanceType"] for t in types.values()]
    assert {"g5.xlarge", "g5.4xlarge", "p4d.24xlarge"} <= set(gpu_types)
    # Ray adds its own SSH rule; a second one in the YAML is a duplicate EC2 rejects.
    assert "IpPermissions" not in config["provider"].get("security_group", {})
    assert all("IamInstanceProfile" in t["node_config"] for t in types.values())
    assert all(t["node_config"]["ImageId"] for t in types.values())


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_cluster_nodes_install_every_workload_extra(path):
    """fair_adv's AutoAttack, the molecular data and boto3 are never missing on a node."""
    setup = " ".join(yaml.safe_load(path.read_text())["setup_commands"])
    for extra in ("mol", "autoattack", "atari-wrappers", "aws"):
        assert re.search(rf"raylab\[[^]]*\b{extra}\b", setup), (path.name, extra)
    assert "import torch, ray, autoattack, datamol, cv2, boto3" in setup
    assert yaml.safe_load(path.read_text())["rsync_filter"] == [".gitignore"]


def test_validation_is_not_vacuous():
    config = yaml.safe_load((REPO / "cluster" / "gpu.yaml").read_text())
    config["max_wokers"] = 3
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(config))


@pytest.mark.slow
def test_sweep_runs_trials_on_both_nodes_of_a_two_node_cluster(tmp_path):
    script = REPO / "tests" / "core" / "two_node_sweep.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
        cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["errors"] == 0 and report["trials"] == 2
    assert len(set(report["trial_nodes"])) == 2
    assert set(report["trial_nodes"]) == set(report["cluster_nodes"])


@pytest.mark.slow
def test_dashboard_flag_serves_on_localhost_and_prints_url(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--dashboard", "--quiet",
         "search.seed=[0]", "config.steps=400", "config.step_time_s=0.05", "--storage", str(tmp_path)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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
