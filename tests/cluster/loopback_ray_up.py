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

import json
import os
import pwd
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

REPO = Path(__file__).resolve().parents[2]
USER = "raylabnode"
HOME = Path("/home") / USER
IPS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
# Kept: what the YAML says about the tree and the nodes. Swapped: provider, auth. Dropped: docker.
KEPT = ("file_mounts", "rsync_filter", "rsync_exclude", "setup_commands", "head_setup_commands",
        "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands",
        "initialization_commands", "upscaling_speed", "idle_timeout_minutes")


def derive(config: dict, key: Path, name: str) -> dict:
    """The loopback form of a cluster YAML: Ray's local provider on IPS, everything else kept."""
    derived = {k: config[k] for k in KEPT if k in config}
    derived.update(
        cluster_name=name,
        provider={"type": "local", "head_ip": IPS[0], "worker_ips": IPS[1:]},
        auth={"ssh_user": USER, "ssh_private_key": str(key)},
        max_workers=len(IPS) - 1,
    )
    return derived


def ensure_user() -> None:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--home-dir", str(HOME), "--shell",
                        "/bin/bash", USER], check=True)
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
    (bin_ / "pip").write_text(f'#!{HOME}/venv/bin/python\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n')
    (bin_ / "ray").write_text(f'#!{HOME}/venv/bin/python\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n')
    for name in ("pip", "ray"):
        os.chmod(bin_ / name, 0o755)
    return stage


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


def start_node(root: Path, index: int, key: Path, stage: Path) -> subprocess.Popen:
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
    cfg = (home / "venv" / "pyvenv.cfg")
    cfg.write_text(cfg.read_text().replace(str(stage), str(HOME / "venv")))
    # The image's environment: its Python first on PATH (gpu.yaml runs `python`, `pip`, `ray`).
    profile = f'export PATH="{HOME}/venv/bin:$PATH"\nexport PIP_DISABLE_PIP_VERSION_CHECK=1\n'
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
    conf.write_text(textwrap.dedent(f"""\
        ListenAddress {IPS[index]}:22
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
        """))
    env = {**os.environ, "NODE": str(node), "HOMEDIR": str(HOME), "CONF": str(conf),
           "TESTSITE_SRC": sysconfig.get_paths()["purelib"], "TESTSITE": str(root / "testsite")}
    log = open(node / "sshd.log", "w")
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", NODE_INIT],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc


def wait_ssh(key: Path, ip: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        r = subprocess.run(["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o",
                            "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o",
                            "ConnectTimeout=5", f"{USER}@{ip}", "true"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd on {ip} did not accept the key: {r.stderr.strip()}")
        time.sleep(0.5)


def ray_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "ray"), *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def main() -> int:
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    assert os.getpid() == 1 or os.environ.get("RAYLAB_LOOPBACK_NAMESPACED") == "1", \
        "run inside its own PID namespace (unshare --pid --fork --mount-proc)"
    # As its namespace's PID 1 this process ignores SIGTERM unless it handles it: end cleanly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ensure_user()
    root = Path(tempfile.mkdtemp(prefix="raylab-loopback-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    key = root / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    stage = node_python(root)
    nodes = [start_node(root, i, key, stage) for i in range(len(IPS))]
    report: dict = {"source": str(source)}
    try:
        for ip in IPS:
            wait_ssh(key, ip)
        run_cluster(source, root, key, report)
    except Exception as err:  # noqa: BLE001 - reported in the JSON line, with the nodes' logs
        report["error"] = f"{type(err).__name__}: {err}"
    finally:
        for proc in nodes:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        report["sshd_logs"] = {p.name: (p / "sshd.log").read_text()[-1000:]
                               for p in sorted(root.glob("node*"))}
        report["ray_logs"] = {f"{log.parts[-6]}/{log.name}": "\n".join(
                                  line for line in log.read_text(errors="replace").splitlines()
                                  if " E " in line or " F " in line or "Check failed" in line
                                  or "rror" in line)[-3000:]
                              for log in sorted(root.glob("node*/tmp/ray/session_2*/logs/*"))
                              if log.name in ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err")}
        shutil.rmtree(root, ignore_errors=True)
        for state in Path("/tmp/ray").glob(f"cluster-{root.name}.*"):  # the local provider's
            state.unlink(missing_ok=True)
    out.write_text(json.dumps(report))
    return 0


def run_cluster(source: Path, root: Path, key: Path, report: dict) -> None:
    derived = derive(yaml.safe_load(source.read_text()), key, root.name)
    cfg = root / "cluster.yaml"
    cfg.write_text(yaml.safe_dump(derived, sort_keys=False))
    t0 = time.monotonic()
    up = ray_cli("up", str(cfg), "--yes", "--no-config-cache")
    report["up"] = {"rc": up.returncode, "s": round(time.monotonic() - t0, 1),
                    "tail": (up.stdout + up.stderr)[-6000:]}
    if up.returncode == 0:
        # The head's autoscaler starts the workers over SSH (min_workers = every worker IP). The
        # check runs from the head's own copy of the tree once the head and one worker are up:
        # Ray 2.60's autoscaler launches the local provider's second worker late or not at all
        # (its instance manager loses track of the head node), which the test does not wait for.
        ex = ray_cli("exec", str(cfg), "python ~/raylab/tests/cluster/node_check.py 2 300")
        line = next((ln for ln in ex.stdout.splitlines() if ln.startswith("NODECHECK ")), None)
        report["nodes"] = json.loads(line[len("NODECHECK "):]) if line else []
        report["exec"] = {"rc": ex.returncode, "tail": (ex.stdout + ex.stderr)[-3000:]}
        report["up_to_exec_s"] = round(time.monotonic() - t0, 1)
    down = ray_cli("down", str(cfg), "--yes")
    report["down"] = {"rc": down.returncode, "tail": (down.stdout + down.stderr)[-2000:]}


if __name__ == "__main__":
    sys.exit(main())
