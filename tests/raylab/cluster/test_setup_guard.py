"""The setup guard reads Ray's own log lines (made here by Ray 2.60's own functions) and stops a
node type after its failed nodes reach the limit. The relaunch loop itself, stopped on a
``ray up`` cluster, is in tests/scenarios/clusters/test_loopback_ray_up.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from ray.autoscaler._private.command_runner import _with_environment_variables, _with_interactive
from ray.autoscaler.v2.instance_manager.common import InstanceUtil
from ray.core.generated.instance_manager_pb2 import Instance, InstanceUpdateEvent

from raylab.cluster import setup_guard

GPU_CHECK = (
    'nvidia-smi -L >/dev/null 2>&1 || { echo "$(hostname): a GPU node type, but nvidia-smi lists no GPU" >&2; '
    "exit 1; }; python -c \"import torch; assert torch.cuda.is_available(), 'no CUDA'\""
)
CONFIG = {
    "setup_commands": ["pip install -q -r lock.txt"],
    "available_node_types": {
        "head": {"resources": {"CPU": 0}},
        "gpu_small": {
            "min_workers": 0,
            "max_workers": 12,
            "resources": {"GPU": 1},
            "worker_setup_commands": ["pip install -q -r lock.txt", 'pip install -e "$HOME/raylab"', GPU_CHECK],
        },
        "cpu": {"min_workers": 0, "max_workers": 12, "resources": {"CPU": 16}},
    },
}


def ray_ran(node: str, line: str) -> str:
    """What Ray's command runner logs before it runs a setup line on ``node`` over ssh with a
    login shell (the autoscaler's way): its own wrapping of the line, in bold as in monitor.out."""
    inner = _with_environment_variables(line, {"RAY_HEAD_IP": "10.0.0.1"})
    cmd = ["ssh", "-tt", "-i", "~/ray_bootstrap_key.pem", f"ubuntu@{node}", *_with_interactive(inner)]
    return f"2026-12-03 22:00:00,000\tVVINFO command_runner.py:401 -- Full command is `\x1b[1m{' '.join(cmd)}\x1b[22m\x1b[26m`"


def ray_failed_setup(node: str, line: str) -> str:
    """The lines Ray logs up to a failed setup line on ``node``: the type's lines before it ran
    too (and succeeded), then the failing one; with login shells the failure names no command."""
    lines = CONFIG["available_node_types"]["gpu_small"]["worker_setup_commands"]
    before = lines[: lines.index(line)] if line in lines else []
    return "\n".join([*(ray_ran(node, ok) for ok in before), ray_ran(node, line), "SSH command failed."])


def ray_install_failed(node: str, node_type: str) -> str:
    """Ray's v2 instance manager's log line for ``node`` going RAY_INSTALLING -> RAY_INSTALL_FAILED."""
    instance = Instance(
        instance_id="im-" + node, instance_type=node_type, cloud_instance_id=node, status=Instance.RAY_INSTALLING
    )
    update = InstanceUpdateEvent(
        instance_id=instance.instance_id,
        new_instance_status=Instance.RAY_INSTALL_FAILED,
        details="failed to install ray with errors: Ray installation failed with unexpected status: update-failed",
    )
    return "2026-12-03 22:00:00,000 INFO instance_manager.py:247 -- " + InstanceUtil.get_log_str_for_update(
        instance, update
    )


def log(*nodes: tuple[str, str, str]) -> str:
    return "\n".join(f"{ray_failed_setup(node, line)}\n{ray_install_failed(node, t)}" for node, t, line in nodes)


def test_failures_name_the_node_type_node_and_failed_line():
    text = log(("10.0.1.5", "gpu_small", GPU_CHECK), ("10.0.1.6", "gpu_small", 'pip install -e "$HOME/raylab"'))
    assert setup_guard.failures(text, CONFIG) == [
        setup_guard.Failure("gpu_small", "10.0.1.5", GPU_CHECK),
        setup_guard.Failure("gpu_small", "10.0.1.6", 'pip install -e "$HOME/raylab"'),
    ]


def test_a_failure_logged_twice_counts_once():
    text = log(("10.0.1.5", "gpu_small", GPU_CHECK))
    assert len(setup_guard.failures(text + "\n" + text, CONFIG)) == 1


def test_a_type_without_its_own_lines_runs_the_cluster_setup_lines():
    (failure,) = setup_guard.failures(log(("10.0.2.7", "cpu", "pip install -q -r lock.txt")), CONFIG)
    assert failure == setup_guard.Failure("cpu", "10.0.2.7", "pip install -q -r lock.txt")


def test_only_types_at_the_limit_are_stopped():
    found = setup_guard.failures(
        log(("a", "gpu_small", GPU_CHECK), ("b", "cpu", "pip install -q -r lock.txt"), ("c", "gpu_small", GPU_CHECK)),
        CONFIG,
    )
    assert set(setup_guard.over_limit(found, 2)) == {"gpu_small"}
    assert setup_guard.over_limit(found, 2)["gpu_small"].node == "c"
    assert set(setup_guard.over_limit(found, 1)) == {"gpu_small", "cpu"}
    assert setup_guard.over_limit(found, 3) == {}


def test_check_once_sets_max_workers_zero_and_writes_one_line(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    config_path = tmp_path / "ray_bootstrap_config.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "failed.txt"
    (logs / "monitor.log").write_text(log(("10.0.1.5", "gpu_small", GPU_CHECK)) + "\n")
    stopped: set[str] = set()
    assert setup_guard.check_once(logs, config_path, 2, stopped, out) == []  # one failure, limit 2
    assert yaml.safe_load(config_path.read_text()) == CONFIG
    (logs / "monitor.out").write_text(log(("10.0.1.6", "gpu_small", GPU_CHECK)) + "\n")
    (line,) = setup_guard.check_once(logs, config_path, 2, stopped, out)
    assert "node type gpu_small stopped after 2 nodes" in line and "on node 10.0.1.6" in line
    assert "nvidia-smi lists no GPU" in line
    now = yaml.safe_load(config_path.read_text())["available_node_types"]
    assert (now["gpu_small"]["min_workers"], now["gpu_small"]["max_workers"]) == (0, 0)
    assert now["cpu"] == CONFIG["available_node_types"]["cpu"]
    assert out.read_text().splitlines() == [line]
    assert setup_guard.check_once(logs, config_path, 2, stopped, out) == []  # said once


def test_a_bad_limit_is_one_line_and_exit_2():
    run = subprocess.run(
        [sys.executable, "-m", "raylab.cluster.setup_guard", "--max-failures", "0"], capture_output=True, text=True
    )
    assert run.returncode == 2
    assert run.stderr.strip() == "error: --max-failures must be at least 1, got 0"


def test_the_failed_line_is_the_last_one_ran_on_that_node():
    text = "\n".join(
        [
            ray_ran("10.0.1.5", 'pip install -e "$HOME/raylab"'),
            ray_ran("10.0.1.50", GPU_CHECK),  # another node, logged later, its address a prefix's extension
            "SSH command failed.",
            ray_install_failed("10.0.1.5", "gpu_small"),
        ]
    )
    assert setup_guard.failures(text, CONFIG) == [
        setup_guard.Failure("gpu_small", "10.0.1.5", 'pip install -e "$HOME/raylab"')
    ]


RECORDED = Path(__file__).with_name("setup_guard_logs")


def test_the_head_logs_of_a_loopback_relaunch_loop(tmp_path):
    """Ray 2.60's own logs from the loopback ``ray up`` of gpu.yaml whose gpu_small node had no
    nvidia-smi (the instance manager's lines of monitor.log, the ssh commands to 127.0.0.2 of
    monitor.out; made by test_loopback_ray_up.py's guard test): two failed nodes, each named
    with the GPU check, though the two files interleave only by their timestamps."""
    logs = tmp_path / "logs"
    shutil.copytree(RECORDED, logs)
    config = yaml.safe_load((logs / "ray_bootstrap_config.yaml").read_text())
    text = setup_guard.merged([(logs / name).read_text() for name in ("monitor.log", "monitor.out")])
    found = setup_guard.failures(text, config)
    assert [(f.node_type, f.node) for f in found] == [("gpu_small", "127.0.0.2-1"), ("gpu_small", "127.0.0.2-2")]
    assert all("nvidia-smi lists no GPU" in f.command for f in found), found
    out = tmp_path / "failed.txt"
    assert setup_guard.check_once(logs, logs / "ray_bootstrap_config.yaml", 3, set(), out) == []
    (line,) = setup_guard.check_once(logs, logs / "ray_bootstrap_config.yaml", 2, set(), out)
    assert "node type gpu_small stopped after 2 nodes" in line and "on node 127.0.0.2-2" in line, line
