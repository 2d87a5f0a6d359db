"""A simulated autoscaling cluster on this machine: Ray's fake multi-node provider.

``RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config=...`` starts a head whose
autoscaler "launches" worker nodes as extra raylets on this machine, with the resources their
node type declares (GPUs included, though no CUDA is behind them). The YAML has the shape of
``cluster/gpu.yaml``: a head with no trial CPUs and the ``trial_driver`` resource, worker
types that declare GPUs. Everything listens on 127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
makes Ray pick the loopback address for every node) and lives under its own temp folder, whose
processes are ended by id on exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

RAY = str(Path(sys.executable).with_name("ray"))
GPU_YAML = Path(__file__).resolve().parents[3] / "cluster" / "gpu.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def autoscaling_config(
    port: int, gpu_nodes: int, idle_timeout_s: float, head: dict | None = None, gpus_per_node: int = 1
) -> dict:
    """gpu.yaml's shape at toy size: its head's resources (updated by ``head``), and worker
    nodes of ``gpus_per_node`` CPUs and as many GPUs."""
    gpu = yaml.safe_load(GPU_YAML.read_text())
    head_resources = {**gpu["available_node_types"][gpu["head_node_type"]]["resources"], **(head or {})}
    return {
        "cluster_name": "raylab-fake",
        "max_workers": gpu_nodes,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle_timeout_s / 60,
        "provider": {
            "type": "fake_multinode",
            "gcs_address": f"127.0.0.1:{port}",
            "launch_multiple": True,
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        "available_node_types": {
            "ray.head.default": {
                "resources": dict(head_resources),
                "node_config": {},
                "max_workers": 0,
            },
            "gpu_small": {
                "resources": {"CPU": gpus_per_node, "GPU": gpus_per_node, "object_store_memory": 100 * 1024**2},
                "node_config": {},
                "min_workers": 0,
                "max_workers": gpu_nodes,
            },
        },
        "head_node_type": "ray.head.default",
        "auth": {},  # the node launcher hashes it into each launch config, even for fake nodes
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }


class FakeCluster:
    def __init__(self, root: Path, port: int, env: dict[str, str]):
        self.root, self.port, self.env = root, port, env
        self.address = f"127.0.0.1:{port}"

    def run(self, *args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
        """A command on this cluster's "head" (``RAY_ADDRESS`` points at it), its environment
        updated by ``env``."""
        return subprocess.run(
            list(args),
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=Path(__file__).resolve().parents[3],
        )

    def pids(self) -> list[int]:
        """Processes of this cluster: those whose environment names its temp folder."""
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                if str(self.root).encode() in (proc / "environ").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
        return found

    def raylet_pid(self, node_id: str) -> int | None:
        """The raylet of a fake worker node (the provider gives each its node id by env)."""
        marker = f"RAY_OVERRIDE_NODE_ID_FOR_TESTING={node_id}".encode()
        for pid in self.pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"raylet" in cmdline.split(b"\0")[0] and marker in Path(f"/proc/{pid}/environ").read_bytes():
                    return pid
            except OSError:
                continue
        return None

    def alive_nodes(self) -> list[dict]:
        code = (
            "import json, ray; ray.init(address='auto', logging_level='ERROR');"
            "print(json.dumps([{'id': n['NodeID'], 'resources': n['Resources']} "
            "for n in ray.nodes() if n['Alive']]))"
        )
        proc = self.run(sys.executable, "-c", code, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        # Ray's autoscaler may print its own line after ours ("(autoscaler +0s) Resized to ...").
        return json.loads([line for line in proc.stdout.splitlines() if line.startswith("[")][-1])


@contextlib.contextmanager
def fake_cluster(
    gpu_nodes: int = 2,
    idle_timeout_s: float = 6.0,
    env: dict | None = None,
    head: dict | None = None,
    gpus_per_node: int = 1,
    unset: tuple[str, ...] = (),
    head_cpus: int = 0,
):
    """Start the simulated cluster; yield a ``FakeCluster``; end every process it started.

    ``head`` updates the head's declared resources (``{"trial_driver": 3}``); ``unset`` names
    variables of this process's environment the cluster's processes must not inherit;
    ``head_cpus``: CPUs the head offers trials (0, as gpu.yaml's head)."""
    root = Path(tempfile.mkdtemp(prefix="rlfake-", dir="/tmp"))
    port = free_port()
    config_path = root / "cluster.yaml"
    config = autoscaling_config(port, gpu_nodes, idle_timeout_s, head, gpus_per_node)
    config_path.write_text(yaml.safe_dump(config))
    head_extra = {
        k: v
        for k, v in config["available_node_types"]["ray.head.default"]["resources"].items()
        if k not in ("CPU", "GPU")
    }
    cluster_env = {
        **{k: v for k, v in os.environ.items() if k not in unset},
        **(env or {}),
        "RAY_FAKE_CLUSTER": "1",
        "RAYLAB_SIMULATED_GPUS": "1",  # its GPUs are resource labels: workers train on the CPU
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every node on 127.0.0.1
        "RAY_TMPDIR": str(root),
        "RAY_ADDRESS": f"127.0.0.1:{port}",
        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1",
        "RAY_AUTH_MODE": "disabled",  # a loopback-only test cluster: no token to hand around
        "RAY_DEDUP_LOGS": "0",
        "PYTHONWARNINGS": "ignore",
    }
    cluster = FakeCluster(root, port, cluster_env)
    cluster.dashboard = f"http://127.0.0.1:{free_port()}"  # Ray's state API is served there
    try:
        start = cluster.run(
            RAY,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--num-cpus={head_cpus}",
            "--num-gpus=0",
            f"--resources={json.dumps(head_extra)}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={cluster.dashboard.rsplit(':', 1)[1]}",
            f"--ray-client-server-port={free_port()}",
            f"--temp-dir={root}",
            f"--autoscaling-config={config_path}",
            "--disable-usage-stats",
            timeout=180,
        )
        assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
        yield cluster
    finally:
        for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            pids = cluster.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while pids and time.monotonic() < deadline:
                pids = [p for p in pids if Path(f"/proc/{p}").exists()]
                time.sleep(0.5)
        shutil.rmtree(root, ignore_errors=True)
