"""``ray up`` for real on loopback nodes: python loopback_ray_up.py CLUSTER_YAML OUT_JSON.

Runs as root inside its own PID namespace (the test starts it under ``unshare --pid --fork
--mount-proc``). Each node (head 127.0.0.1, workers 127.0.0.2 and 127.0.0.3) is an sshd in a PID
and mount namespace of its own: its own home folder for the node user, its own /tmp (so each
node's Ray session folder and ``ray stop`` are its own), and this machine's Python readable by
that user. The cluster YAML is derived from CLUSTER_YAML: the same file_mounts, rsync_filter,
rsync_exclude, setup_commands and start commands; the provider swapped for Ray's ``local`` one
and the Docker block dropped. Ray's own CLI then brings the cluster up (``ray up``), runs a check
on every node through ``ray exec ... --address auto`` and tears it down (``ray down``).

The node's Python stands in for the image's: a venv of this machine's Python 3.11 that sees the
test environment's packages (read-only, one path line), so setup's pip installs find every
requirement satisfied and install only the node's own copy of the repository (editable).
Prints one JSON line: what each step returned and what the nodes reported.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from pathlib import Path

import yaml
from s3_store import CREDENTIALS, keys  # this script's folder (tests/scenarios/clusters) is on sys.path

from raylab.run_folder import RESULT_FILE

REPO = Path(__file__).resolve().parents[3]
USER = "raylabnode"
HOME = Path("/home") / USER
# The head and the two workers of the default run; a YAML whose node types need more IPs gets
# 127.0.0.4 and on (node_ips).
IPS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
# Kept: what the YAML says about the tree, the node types and the nodes. Swapped: provider, auth,
# each node type's node_config (its loopback IPs). Dropped: docker.
KEPT = (
    "file_mounts",
    "rsync_filter",
    "rsync_exclude",
    "setup_commands",
    "head_setup_commands",
    "worker_setup_commands",
    "head_start_ray_commands",
    "worker_start_ray_commands",
    "initialization_commands",
    "upscaling_speed",
    "idle_timeout_minutes",
    "head_node_type",
)
# The worker types launched at `ray up` (min_workers) unless --launch says otherwise: one GPU
# type and the CPU type, the two kinds of setup a worker runs.
LAUNCH = {"gpu_small": 1, "cpu": 1}
# What a loopback node cannot do as the YAML says, each replaced in every setup line it occurs in
# (and an error if it occurs in none, so a changed gpu.yaml cannot silently run something else):
# (what the YAML says, what the loopback runs, why).
STAND_INS = (
    (
        'pip install -q -r "$HOME/raylab/cluster/lock/gpu-py311.txt"',
        'pip install -q -r "$HOME/raylab/cluster/lock/cpu-py311.txt"',
        "the lock line takes the GPU lock where nvidia-smi lists a GPU, which the stand-in does on GPU types;"
        " its CUDA wheels (3 GB) cannot install here, the CPU lock (the same pins, the test environment's) can",
    ),
    (
        "python -m raylab.cluster.node_gpu",
        "python -c 'import raylab.cluster.node_gpu' && echo 'loopback: no CUDA device here, nvidia-smi is a stand-in'",
        "torch sees no CUDA device on this machine and the stand-in nvidia-smi has no driver version; the"
        " nvidia-smi half of the GPU check runs as written, the node check's module is imported",
    ),
)
# The stand-in nvidia-smi on the PATH of nodes of GPU types (their resources declare GPUs, which
# Ray's updater passes to `ray start` as RAY_OVERRIDE_RESOURCES): it lists one GPU and logs each
# call, so the report shows which setup lines asked for it on which node.
NVIDIA_SMI = """#!/bin/sh
echo "$*" >> "$HOME/loopback-gpu/calls.log"
echo "GPU 0: NVIDIA A10G (UUID: GPU-loopback-$RAYLAB_LOOPBACK_NODE_IP)"
"""
PROVIDER = "loopback_provider.LoopbackProvider"  # this folder's loopback_provider.py
# What report["autoscaler_log"] keeps of the head's monitor.* logs.
AUTOSCALER_WORDS = ("Launching", "installation failed", "RAY_INSTALL_FAILED", "GPU node type", "raylab setup guard")


def node_ips(config: dict, launch: dict[str, int] | None = None) -> dict[str, list[str]]:
    """Each worker type of the YAML's node-type list mapped onto loopback IPs: the launched types
    (``launch``, default LAUNCH) first with as many IPs as nodes, then one IP for every other
    worker type (spot types among them), which a sweep's demand may launch."""
    launch = LAUNCH if launch is None else launch
    types = config.get("available_node_types", {})
    unknown = sorted(set(launch) - set(types))
    if unknown:
        raise ValueError(f"--launch names node types the YAML does not declare: {unknown} (it has {sorted(types)})")
    workers = [t for t in types if t != config.get("head_node_type")]
    ordered = [t for t in launch if t in workers] + [t for t in workers if t not in launch]
    mapping, nxt = {}, 2
    for name in ordered:
        count = max(launch.get(name, 1), 1)
        mapping[name] = [f"127.0.0.{nxt + i}" for i in range(count)]
        nxt += count
    return mapping


def stand_in(lines: list[str], used: set[int]) -> list[str]:
    out = []
    for line in lines:
        for i, (real, loop, _) in enumerate(STAND_INS):
            if real in line:
                line = line.replace(real, loop)
                used.add(i)
        out.append(line)
    return out


def derive(config: dict, key: Path, name: str, state_dir: Path | None = None, launch: dict | None = None) -> dict:
    """The loopback form of a cluster YAML: its node types on loopback IPs (node_ips) through the
    loopback provider, every setup line with STAND_INS applied, everything else kept. A YAML
    without a node-type list (local.yaml) gets Ray's ``local`` provider on IPS."""
    derived = {k: config[k] for k in KEPT if k in config}
    derived.update(cluster_name=name, auth={"ssh_user": USER, "ssh_private_key": str(key)})
    if "available_node_types" not in config:
        derived.update(provider={"type": "local", "head_ip": IPS[0], "worker_ips": IPS[1:]}, max_workers=len(IPS) - 1)
        return derived
    launch = LAUNCH if launch is None else launch
    mapping = node_ips(config, launch)
    used: set[int] = set()
    types = {}
    for type_name, spec in config["available_node_types"].items():
        kept = {k: spec[k] for k in ("resources", "labels", "worker_setup_commands") if k in spec}
        if "worker_setup_commands" in kept:
            kept["worker_setup_commands"] = stand_in(kept["worker_setup_commands"], used)
        if type_name in mapping:
            ips = mapping[type_name]
            kept.update(node_config={"ips": ips}, min_workers=launch.get(type_name, 0), max_workers=len(ips))
        else:
            kept["node_config"] = {}
        types[type_name] = kept
    for k in ("setup_commands", "head_setup_commands", "worker_setup_commands"):
        if k in derived:
            derived[k] = stand_in(derived[k], used)
    unused = [STAND_INS[i][0] for i in range(len(STAND_INS)) if i not in used]
    if unused:
        raise ValueError(f"stand-ins whose line the YAML no longer has: {unused}")
    # What Ray's defaults.yaml of a cloud provider fills in (an external provider has none).
    for k in ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands"):
        derived.setdefault(k, [])
    derived.setdefault("cluster_synced_files", [])
    derived.update(
        provider={"type": "external", "module": PROVIDER, "head_ip": IPS[0], "state_dir": str(state_dir)},
        available_node_types=types,
        max_workers=sum(len(ips) for ips in mapping.values()),
    )
    return derived


def ensure_user() -> None:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--no-create-home", "--home-dir", str(HOME), "--shell", "/bin/bash", USER], check=True
        )
    # OpenSSH refuses an account whose password is locked ('!') when PAM is off; '*' only says
    # that no password logs in, and the key still does.
    subprocess.run(["usermod", "-p", "*", USER], check=True)
    HOME.mkdir(parents=True, exist_ok=True)  # the mount point of each node's own home


def node_python(root: Path) -> Path:
    """A venv of this Python at HOME/venv (the same path on every node), seeing this environment's
    packages through one path line; built once and copied into each node's home."""
    stage = root / "venv-stage"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(stage)], check=True)
    site = next((stage / "lib").glob("python3*")) / "site-packages"
    # Each node sees this environment's packages at ROOT/testsite, a bind mount of them made in
    # its own namespace: their real folder may be under /tmp or /root, which nodes cover.
    (root / "testsite").mkdir(mode=0o755)
    (site / "test-environment.pth").write_text(str(root / "testsite") + "\n")
    bin_ = stage / "bin"
    (bin_ / "pip").write_text(
        f"#!{HOME}/venv/bin/python\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"
    )
    (bin_ / "ray").write_text(RAY_WRAPPER.format(python=f"{HOME}/venv/bin/python"))
    for name in ("pip", "ray"):
        os.chmod(bin_ / name, 0o755)
    # The head's autoscaler imports the loopback provider (the YAML's provider.module) from here.
    shutil.copy(Path(__file__).with_name("loopback_provider.py"), site)
    return stage


# The node's `ray`: Ray's own CLI, with one stand-in for a real machine. All loopback nodes share
# this machine's network stack, and Ray takes a node's IP to be the source address of a UDP
# socket "connected" to the head's address (2.60's node_ip_address_from_perspective): on every
# worker that is 127.0.0.1, so both workers registered under one IP and collided on the ports
# Ray binds to the node's IP (its dashboard agent's fixed 52365 among them); that is why
# 127.0.0.3 never joined. On a real machine the detected IP is the machine's own; here each
# worker's `ray start` gets its loopback IP explicitly. (The head keeps the address Ray gives
# it: Ray maps 127.0.0.1 to this machine's interface address, as it does for any local head.)
# And its fixed default ports are made free ones, since this machine's other Rays may hold them.
RAY_WRAPPER = """#!{python}
import os, socket, sys
from ray.scripts.scripts import main


def free_port():
    with socket.socket() as sock:
        sock.bind(("", 0))
        return str(sock.getsockname()[1])


if sys.argv[1:2] == ["start"]:
    ip = os.environ.get("RAYLAB_LOOPBACK_NODE_IP")
    given = " ".join(sys.argv)
    if ip and ip != "127.0.0.1" and "--node-ip-address" not in given:
        sys.argv.append("--node-ip-address=" + ip)
    # Ray's fixed default ports, taken on this machine by any other Ray (the suite's, another
    # session's): free ones instead. Each real node has these ports to itself.
    for flag in ("--dashboard-port", "--dashboard-agent-listen-port", "--ray-client-server-port"):
        if flag not in given:
            sys.argv.append(flag + "=" + free_port())
sys.exit(main())
"""

NODE_INIT = r"""
set -e
mount --make-rprivate /
mount --bind "$NODE/home" "$HOMEDIR"
mount --bind "$TESTSITE_SRC" "$TESTSITE"
# This machine's Python lives in root's home, which the node user cannot enter: cover /root
# with an empty, enterable folder and put the Python installation back in it.
mkdir -p "$NODE/stage"
mount --bind /root/.pyenv "$NODE/stage"
mount -t tmpfs -o mode=755 tmpfs /root
mkdir /root/.pyenv
mount --move "$NODE/stage" /root/.pyenv
mount --bind "$NODE/tmp" /tmp
chmod 1777 /tmp
mkdir -p /run/sshd
exec /usr/sbin/sshd -D -e -f "$CONF"
"""


def start_node(
    root: Path, index: int, key: Path, stage: Path, env: dict[str, str], ip: str | None = None, gpu: bool = False
) -> subprocess.Popen:
    """The sshd node ``node{index}`` on ``ip`` (default ``IPS[index]``); ``gpu``: the stand-in
    nvidia-smi (NVIDIA_SMI) first on its PATH, as on a node of a GPU type."""
    ip = ip or IPS[index]
    node = root / f"node{index}"
    (node / "tmp").mkdir(parents=True)
    home = node / "home"
    home.mkdir()
    # The venv must live at HOME/venv: build its interpreter links there, then copy it in.
    shutil.copytree(stage, home / "venv", symlinks=True)
    for script in (home / "venv" / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            text = script.read_text(errors="ignore")
            script.write_text(text.replace(str(stage), str(HOME / "venv")))
    cfg = home / "venv" / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace(str(stage), str(HOME / "venv")))
    # The image's environment: its Python first on PATH (gpu.yaml runs `python`, `pip`, `ray`).
    # What a cloud node has besides: its own IP (above), credentials for the results bucket (an
    # instance profile on AWS) and the resources its node type declares (Ray's updater exports
    # RAY_OVERRIDE_RESOURCES for cloud providers, never for the local one).
    # And, for this machine's load (2 cores shared by many test processes): Ray's waits for a
    # node's own processes to start, 15 to 30 s by default, raised to two minutes.
    env = {
        "RAYLAB_LOOPBACK_NODE_IP": ip,
        "RAY_agent_register_timeout_ms": "120000",
        "RAY_raylet_start_wait_time_s": "120",
        **env,
    }
    if gpu:
        (home / "loopback-gpu").mkdir()
        (home / "loopback-gpu" / "nvidia-smi").write_text(NVIDIA_SMI)
        os.chmod(home / "loopback-gpu" / "nvidia-smi", 0o755)
    path = f"{HOME}/loopback-gpu:{HOME}/venv/bin" if gpu else f"{HOME}/venv/bin"
    profile = f'export PATH="{path}:$PATH"\nexport PIP_DISABLE_PIP_VERSION_CHECK=1\n' + "".join(
        f"export {k}={shlex.quote(v)}\n" for k, v in env.items()
    )
    (home / ".bashrc").write_text(profile)
    (home / ".profile").write_text(profile)
    ssh = home / ".ssh"
    ssh.mkdir()
    shutil.copy(key.with_suffix(".pub"), ssh / "authorized_keys")
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(home)], check=True)
    os.chmod(home, 0o755)
    hostkey = node / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True)
    conf = node / "sshd_config"
    conf.write_text(
        textwrap.dedent(f"""\
        ListenAddress {ip}:22
        HostKey {hostkey}
        PidFile {node}/sshd.pid
        UsePAM no
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        PubkeyAuthentication yes
        PermitRootLogin no
        AllowUsers {USER}
        StrictModes no
        MaxStartups 100
        MaxSessions 100
        """)
    )
    env = {
        **os.environ,
        "NODE": str(node),
        "HOMEDIR": str(HOME),
        "CONF": str(conf),
        "TESTSITE_SRC": sysconfig.get_paths()["purelib"],
        "TESTSITE": str(root / "testsite"),
    }
    log = open(node / "sshd.log", "w")
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", NODE_INIT],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return proc


def wait_for_free_ips(ips: list[str], timeout: float = 1800) -> None:
    """Wait until nothing listens on port 22 of ``ips``: another loopback cluster on this machine
    (another test session's) holds them until its run ends. One loopback cluster at a time: two
    sshds cannot share a port 22, and moving a second cluster to other 127.x addresses does not
    help, since each head's GCS listens on port 6379 of every address (a second head at
    127.0.3.1 reached the first one's GCS: "Session name ... does not match persisted value")."""
    import socket

    deadline = time.monotonic() + timeout
    while True:
        busy = []
        for ip in ips:
            with socket.socket() as sock:
                sock.settimeout(1)
                if sock.connect_ex((ip, 22)) == 0:
                    busy.append(ip)
        if not busy:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"port 22 of {busy} still taken (another loopback cluster) after {timeout:.0f} s")
        time.sleep(5)


def wait_ssh(key: Path, ip: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        r = subprocess.run(
            [
                "ssh",
                "-i",
                str(key),
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=5",
                f"{USER}@{ip}",
                "true",
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd on {ip} did not accept the key: {r.stderr.strip()}")
        time.sleep(0.5)


# Ray 2.60's `ray up` starts the head with autoscaler v2 unless RAY_UP_enable_autoscaler_v2=0
# (commands.py: it then exports RAY_enable_autoscaler_v2=1 to the head's `ray start`); --autoscaler
# picks one. With the local provider (local.yaml) v2 never brings up the last worker IP: its instance manager adopts
# the head's Ray node as an instance of the one node type the local provider has, then drops
# it ("cloud instance 127.0.0.1 no longer found": the head's own copy of the provider's state
# file lists the head as terminated, which only v1 corrects), and its scheduler logs "Adding 1
# nodes to satisfy min count" every few seconds without queueing one. v1 launches every worker
# IP; so do docs/cluster.md's instructions for cluster/local.yaml.
RAY_CLI_ENV = {"RAY_UP_enable_autoscaler_v2": "0"}
AUTOSCALER_ENV = {"v1": {"RAY_UP_enable_autoscaler_v2": "0"}, "v2": {"RAY_UP_enable_autoscaler_v2": "1"}}


def ray_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    # The launcher imports the loopback provider from this folder, as the head does from its venv.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [str(Path(sys.executable).parent / "ray"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **RAY_CLI_ENV},
    )


LAB_INIT = '''\
"""A lab's one-line workload: reports a value from its config."""
from dataclasses import dataclass

from raylab import session
from raylab.workloads import Workload


@dataclass(frozen=True)
class Config:
    value: float = 1.0


def train_loop(config):
    session.report({"lab/value": float(config.get("value", 1.0))})


WORKLOAD = Workload(config="loopback_lab:Config", loop="loopback_lab:train_loop",
                    metrics=("lab/value",), description="a lab package of the loopback test")
'''

LAB_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "loopback-lab"
version = "0.1"

[project.entry-points."raylab.workloads"]
lab_echo = "loopback_lab:WORKLOAD"

[tool.setuptools]
packages = ["loopback_lab"]
"""

LAB_EXPERIMENT = """\
workload: lab_echo
metric: lab/value
mode: max
config: {value: 2.5}
resources: {workers: 1, cpus_per_worker: 1}
"""

# docs/cluster.md's two lines for a lab's own workload package (cluster section): a file mount of its
# folder and a setup line installing it on every node.
LAB_MOUNT = "~/lab-package"
LAB_SETUP = "pip install -q -e ~/lab-package"
# docs/cluster.md's data step: a data folder mounted on every node (copied at each node's setup), and
# data made on the head after `ray up` pushed from there to every node that is up.
DATA_MOUNT = "~/raylab/data"
PUSH_FROM_HEAD = "ray rsync-up ~/ray_bootstrap_config.yaml {path} {path} --all-nodes"


def lab_package(root: Path) -> Path:
    """A lab's own workload package, outside the repository: one workload registered through the
    ``raylab.workloads`` entry-point group, and one experiment YAML of it."""
    pkg = root / "lab-package"
    (pkg / "loopback_lab").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(LAB_PYPROJECT)
    (pkg / "loopback_lab" / "__init__.py").write_text(LAB_INIT)
    (pkg / "lab_echo.yaml").write_text(LAB_EXPERIMENT)
    return pkg


def start_s3():
    """moto's S3 server on 127.0.0.1 (every node reaches it: they share this network stack),
    with a bucket ``raylab``: ``(server, storage_uri, client)``."""
    import socket

    import boto3
    from moto.server import ThreadedMotoServer

    os.environ.update(CREDENTIALS)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="raylab")
    return server, f"s3://raylab/runs?endpoint_override={endpoint}&scheme=http", client


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cluster_yaml", type=Path)
    parser.add_argument("out_json", type=Path)
    parser.add_argument(
        "--sweep", action="append", default=[], help="an experiment run with --smoke from the head's copy of the tree"
    )
    parser.add_argument("--lab", action="store_true", help="mount, install and run a lab package")
    parser.add_argument(
        "--data", action="store_true", help="docs data step: a data folder mounted on every node, and synced on"
    )
    parser.add_argument("--preflight", default="", help="experiments whose preflight workers run")
    parser.add_argument("--nodes", type=int, default=len(IPS), help="nodes the check waits for before it runs")
    parser.add_argument(
        "--launch",
        action="append",
        default=[],
        metavar="TYPE=N",
        help="worker types launched at `ray up` (min_workers); default: "
        + ",".join(f"{k}={v}" for k, v in LAUNCH.items()),
    )
    parser.add_argument("--autoscaler", choices=sorted(AUTOSCALER_ENV), default="v1")
    parser.add_argument(
        "--guard-wait",
        type=float,
        default=0,
        help="after the check, wait up to this many seconds for the setup guard's line on the head",
    )
    parser.add_argument("--observe", type=float, default=0, help="then keep the cluster up this many seconds more")
    parser.add_argument(
        "--no-gpu-stand-in", action="store_true", help="GPU types' nodes without the stand-in nvidia-smi (a control)"
    )
    args = parser.parse_args()
    RAY_CLI_ENV.update(AUTOSCALER_ENV[args.autoscaler])
    args.launch = {t: int(n) for t, n in (item.split("=", 1) for item in args.launch)} if args.launch else None
    source, out = args.cluster_yaml, args.out_json
    assert os.getpid() == 1 or os.environ.get("RAYLAB_LOOPBACK_NAMESPACED") == "1", (
        "run inside its own PID namespace (unshare --pid --fork --mount-proc)"
    )
    # As its namespace's PID 1 this process ignores SIGTERM unless it handles it: end cleanly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ensure_user()
    root = Path(tempfile.mkdtemp(prefix="raylab-loopback-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    key = root / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    stage = node_python(root)
    config = yaml.safe_load(source.read_text())
    s3 = start_s3() if (args.sweep or args.lab) else None
    node_env = dict(CREDENTIALS) if s3 else {}
    # One sshd node per IP: the head, then each worker type's IPs (GPU types with the stand-in).
    state_dir = root / "provider"
    state_dir.mkdir()
    shutil.chown(state_dir, USER, USER)
    args.state_dir = state_dir
    types = config.get("available_node_types", {})
    mapping = node_ips(config, args.launch) if types else {"": IPS[1:]}
    on = [(IPS[0], False)] + [
        (ip, types.get(t, {}).get("resources", {}).get("GPU", 0) > 0) for t, ips in mapping.items() for ip in ips
    ]
    report: dict = {"source": str(source), "node_types": mapping}
    if args.no_gpu_stand_in:
        on = [(ip, False) for ip, _ in on]
    wait_for_free_ips([ip for ip, _ in on])
    nodes = [start_node(root, i, key, stage, node_env, ip=ip, gpu=gpu) for i, (ip, gpu) in enumerate(on)]
    try:
        for ip, _ in on:
            wait_ssh(key, ip)
        run_cluster(config, root, key, report, args, s3)
    except Exception as err:  # noqa: BLE001 - reported in the JSON line, with the nodes' logs
        report["error"] = f"{type(err).__name__}: {err}"
    finally:
        for proc in nodes:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if s3:
            s3[0].stop()
        report["sshd_logs"] = {p.name: (p / "sshd.log").read_text()[-1000:] for p in sorted(root.glob("node*"))}
        # Which setup lines asked the stand-in nvidia-smi, per node IP (GPU types' nodes only).
        report["nvidia_smi_calls"] = {
            ip: (root / f"node{i}" / "home" / "loopback-gpu" / "calls.log").read_text().splitlines()
            for i, (ip, gpu) in enumerate(on)
            if gpu and (root / f"node{i}" / "home" / "loopback-gpu" / "calls.log").exists()
        }
        report["ray_logs"] = {
            f"{log.parts[-6]}/{log.name}": "\n".join(
                line
                for line in log.read_text(errors="replace").splitlines()
                if " E " in line or " F " in line or "Check failed" in line or "rror" in line
            )[-3000:]
            for log in sorted(root.glob("node*/tmp/ray/session_2*/logs/*"))
            if log.name
            in (
                "raylet.out",
                "raylet.err",
                "gcs_server.out",
                "gcs_server.err",
                "monitor.out",
                "monitor.err",
                "dashboard_agent.log",
                "dashboard.log",
            )
        }
        report["launches"] = launches(root / "provider")
        # The head's autoscaler on worker setup: launches, failed setup lines, failed installs.
        report["autoscaler_log"] = "\n".join(
            line
            for log in sorted(root.glob("node0/tmp/ray/session_2*/logs/monitor.*"))
            for line in log.read_text(errors="replace").splitlines()
            if any(w in line for w in AUTOSCALER_WORDS) and "command_runner" not in line  # not the ssh commands
        )[-20000:]
        shutil.rmtree(root, ignore_errors=True)
        for state in Path("/tmp/ray").glob(f"cluster-{root.name}.*"):  # the local provider's
            state.unlink(missing_ok=True)
    out.write_text(json.dumps(report))
    return 0


def run_cluster(config: dict, root: Path, key: Path, report: dict, args, s3) -> None:
    derived = derive(config, key, root.name, getattr(args, "state_dir", root), getattr(args, "launch", None))
    report["derived"] = derived
    if args.lab:
        derived["file_mounts"] = {**derived.get("file_mounts", {}), LAB_MOUNT: str(lab_package(root))}
        derived["setup_commands"] = [*derived.get("setup_commands", []), LAB_SETUP]
        # docs/cluster.md: in gpu.yaml the line goes into each node type's own setup lines too (Ray runs
        # those in place of setup_commands on that type).
        for spec in derived.get("available_node_types", {}).values():
            if "worker_setup_commands" in spec:
                spec["worker_setup_commands"] = [*spec["worker_setup_commands"], LAB_SETUP]
    expect = []
    if args.data:
        # docs/cluster.md's data step: the data folder (seagram's data/isonet split) is a file mount,
        # copied to each node as it is set up. (Not file_mounts_sync_continuously: on a change
        # it re-runs every worker's start commands, whose `ray stop` ends the trials running
        # there, and it hashes the mounts' whole contents, __pycache__ included, each update.)
        source = root / "data-source"
        (source / "isonet").mkdir(parents=True)
        (source / "isonet" / "from-launcher").write_text("split\n")
        derived["file_mounts"] = {**derived.get("file_mounts", {}), DATA_MOUNT: str(source)}
        expect = [f"{DATA_MOUNT}/isonet/from-launcher", f"{DATA_MOUNT}/stores/from-head"]
    cfg = root / "cluster.yaml"
    cfg.write_text(yaml.safe_dump(derived, sort_keys=False))
    t0 = time.monotonic()
    up = ray_cli("up", str(cfg), "--yes", "--no-config-cache")
    report["up"] = {"rc": up.returncode, "s": round(time.monotonic() - t0, 1), "tail": (up.stdout + up.stderr)[-6000:]}
    if up.returncode == 0:
        # The head's autoscaler starts the workers over SSH (min_workers = every worker IP); the
        # check waits for all of them, then runs one task pinned to each node from the head's
        # own copy of the tree: the imports and every workload's preflight, there.
        if args.data:  # data made after `ray up` on the head (the teacher's stores): docs/cluster.md's line
            wait = ray_cli(
                "exec",
                str(cfg),
                f"python ~/raylab/tests/scenarios/clusters/node_check.py "
                f"--nodes {args.nodes} --timeout 300 --wait-only",
            )
            made = ray_cli(
                "exec", str(cfg), f"mkdir -p {DATA_MOUNT}/stores && echo store > {DATA_MOUNT}/stores/from-head"
            )
            push = ray_cli("exec", str(cfg), PUSH_FROM_HEAD.format(path=f"{DATA_MOUNT}/stores/"))
            report["push"] = {
                "rc": [wait.returncode, made.returncode, push.returncode],
                "tail": (push.stdout + push.stderr)[-2000:],
            }
        check = (
            f"python ~/raylab/tests/scenarios/clusters/node_check.py --nodes {args.nodes} --timeout 300"
            f" --preflight '{args.preflight}'" + "".join(f" --expect {e}" for e in expect)
        )
        ex = ray_cli("exec", str(cfg), check)
        line = next((ln for ln in ex.stdout.splitlines() if ln.startswith("NODECHECK ")), None)
        report["nodes"] = json.loads(line[len("NODECHECK ") :]) if line else []
        report["exec"] = {"rc": ex.returncode, "tail": (ex.stdout + ex.stderr)[-3000:]}
        report["up_to_exec_s"] = round(time.monotonic() - t0, 1)
        if getattr(args, "guard_wait", 0):
            report["guard"] = setup_guard_line(cfg, args.guard_wait, args.observe, args.state_dir)
        runs = [(name, f"cd ~/raylab && python -m raylab.tune {name} --smoke") for name in args.sweep]
        if args.lab:
            runs.append(("lab_echo", f"python -m raylab.tune {LAB_MOUNT}/lab_echo.yaml"))
        report["sweeps"] = {}
        for name, command in runs:
            t1 = time.monotonic()
            run = f"loopback-{name}"
            sweep = ray_cli(
                "exec",
                str(cfg),
                f"{command} --address auto --quiet --name {run} --storage {shlex.quote(s3[1])}",
                timeout=1200,
            )
            report["sweeps"][name] = {
                "rc": sweep.returncode,
                "s": round(time.monotonic() - t1, 1),
                "tail": (sweep.stdout + sweep.stderr)[-2500:],
                "trials": trial_rows(s3[2], run),
            }
        report["sweeps_s"] = round(time.monotonic() - t0 - report["up_to_exec_s"], 1)
    down = ray_cli("down", str(cfg), "--yes")
    report["down"] = {"rc": down.returncode, "tail": (down.stdout + down.stderr)[-2000:]}


def setup_guard_line(cfg: Path, wait: float, observe: float, state_dir: Path) -> dict:
    """The setup guard's line on the head (``~/raylab-setup-failed.txt``, cluster/gpu.yaml's head
    start commands run the guard) once it is there, how long it took and the nodes launched by
    then (``launches_at_line``); then ``observe`` more seconds of the cluster running, for the
    autoscaler to relaunch what it would (``launches`` in the report: all of them)."""
    t0 = time.monotonic()
    got = ray_cli(
        "exec",
        str(cfg),
        f"timeout {wait:.0f} bash -c 'until [ -s ~/raylab-setup-failed.txt ]; do sleep 5; done';"
        " cat ~/raylab-setup-failed.txt 2>/dev/null; cat ~/raylab-setup-guard.log 2>/dev/null",
        timeout=wait + 120,
    )
    found = {"s": round(time.monotonic() - t0, 1), "tail": (got.stdout + got.stderr)[-3000:]}
    # The guard writes its line to the file and to its log (printed after it): each once here.
    found["lines"] = list(dict.fromkeys(ln for ln in got.stdout.splitlines() if ln.startswith("raylab setup guard:")))
    found["launches_at_line"] = launches(state_dir)
    time.sleep(observe)
    return found


def launches(state_dir: Path) -> list[str]:
    """Every node the loopback provider launched, in order: ``IP node_type``."""
    return [ln for p in sorted(state_dir.glob("*.launches")) for ln in p.read_text().splitlines()]


def trial_rows(client, run: str) -> dict:
    """Per trial of a run in the bucket: the nodes Tune says ran it (``node_ip`` of its
    result.json rows) and its last row's plain values."""
    found = {}
    for key in keys(client, f"runs/{run}/"):
        if key.endswith(f"/{RESULT_FILE}"):
            text = client.get_object(Bucket="raylab", Key=key)["Body"].read().decode()
            rows = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
            if rows:
                found[key.split("/")[2]] = {
                    "node_ips": sorted({str(r.get("node_ip")) for r in rows}),
                    "last": {k: v for k, v in rows[-1].items() if isinstance(v, (int, float, str))},
                }
    return found


if __name__ == "__main__":
    sys.exit(main())
