"""``ray up`` / ``ray exec`` / ``ray down`` for real, on sshd nodes on the loopback range.

The cluster YAMLs are derived from cluster/gpu.yaml and cluster/local.yaml (same file mounts,
rsync filter and excludes, setup and start commands; Ray's local provider, no Docker) by
``loopback_ray_up.py``, which runs in a PID namespace of its own: the start commands' ``ray
stop`` reaches only the nodes' own Ray, never another Ray on this machine. Needs root (user,
namespaces, sshd on port 22 of 127.0.0.x), Debian's openssh-server and rsync (``make sshd``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("loopback_ray_up.py")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a node user, namespaces, sshd"),
    pytest.mark.skipif(not (Path("/usr/sbin/sshd").exists() and shutil.which("rsync")
                            and shutil.which("unshare")),
                       reason="needs openssh-server, rsync and unshare (make sshd)"),
]


# The default run brings up gpu.yaml's derived cluster (about 4 minutes); local.yaml's and the
# two controls (about 3-4 minutes each) run with RAYLAB_FULL_CLUSTER=1.
full = pytest.mark.skipif(os.environ.get("RAYLAB_FULL_CLUSTER") != "1",
                          reason="set RAYLAB_FULL_CLUSTER=1 (3-4 minutes each)")


def loopback_ray_up(cluster_yaml: Path, tmp_path: Path, tree: Path = REPO) -> dict:
    """Run the harness with ``tree`` as the folder ``ray up`` runs in (what ``~/raylab: .`` copies)."""
    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    proc = subprocess.run(
        ["timeout", "-s", "KILL", "1500", "unshare", "--pid", "--fork", "--mount-proc",
         sys.executable, str(SCRIPT), str(cluster_yaml), str(out)],
        cwd=tree, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", ["gpu.yaml", pytest.param("local.yaml", marks=full)])
def test_ray_up_sets_up_every_node_and_runs_from_the_nodes_copy(name, tmp_path):
    report = loopback_ray_up(REPO / "cluster" / name, tmp_path)
    assert "error" not in report, report["error"]
    assert report["up"]["rc"] == 0, report["up"]["tail"]
    nodes = report["nodes"]
    print(json.dumps({k: report[k] for k in ("up_to_exec_s",)}), *nodes, sep="\n")
    assert len(nodes) >= 2, report["exec"]["tail"]  # the head and at least one worker node
    for node in nodes:
        # Each node imports raylab, raylab.data and every workload from its own copy of the tree.
        assert all(p.startswith(node["home"] + "/raylab") for p in node["raylab"]), node
        assert node["raylab_data"].startswith(node["home"] + "/raylab/raylab/data/"), node
        assert {"toy", "dqn_softlinf", "backdoor", "fair_adv", "seagram", "boltz_distill",
                "admet_probe"} <= set(node["workloads"]), node
    assert report["down"]["rc"] == 0, report["down"]["tail"]




@full
def test_control_ray_up_fails_when_the_setup_check_names_a_missing_module(tmp_path):
    """The same run with the setup check line as it was (``autoattack``, a module no package
    installs) stops at the head's setup."""
    config = (REPO / "cluster" / "gpu.yaml").read_text().replace("pyautoattack,", "autoattack,")
    (tmp_path / "old-setup.yaml").write_text(config)
    report = loopback_ray_up(tmp_path / "old-setup.yaml", tmp_path)
    print(report["up"]["tail"][-1500:])
    assert report["up"]["rc"] != 0
    assert "No module named 'autoattack'" in report["up"]["tail"]


@full
def test_control_ray_up_fails_when_a_tracked_package_is_not_copied(tmp_path):
    """The same run from a tree whose .gitignore has git's ``!raylab/data/`` negation (which
    Ray's rsync filter ignores): raylab/data/ never reaches the head and its setup stops."""
    tree = tmp_path / "tree"
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    for rel in listed.stdout.splitlines():
        if (REPO / rel).is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, tree / rel)
    (tree / ".gitignore").write_text("results/\n__pycache__/\ndata/\n!raylab/data/\n")
    report = loopback_ray_up(tree / "cluster" / "gpu.yaml", tmp_path, tree=tree)
    print(report["up"]["tail"][-1500:])
    assert report["up"]["rc"] != 0
    assert "No module named 'raylab.data'" in report["up"]["tail"]
