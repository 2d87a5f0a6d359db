"""A spot reclaim on the loopback ``ray up`` cluster, mid-sweep.

``python loopback_preemption.py run CLUSTER_YAML OUT_JSON [--checkpoint-every N]`` runs as PID 1
of its own PID namespace (``unshare --pid --fork --mount-proc``), as ``loopback_ray_up.py`` does,
and uses its nodes: a head (127.0.0.1) and two workers (127.0.0.2, 127.0.0.3), each an sshd in a
PID namespace of its own, brought up by Ray's own ``ray up`` of CLUSTER_YAML's loopback form.
Each worker declares one CPU (``RAY_OVERRIDE_RESOURCES``, as a cloud node type's resources
reach its ``ray start``), so the sweep's two one-CPU toy trials run one on each worker.

1. From the head (``ray exec``), a two-trial toy sweep with frequent checkpoints onto the
   loopback S3 server, ``failure.max_failures: 3``.
2. Once both trials have reported step ``STRIKE_STEP``, worker 127.0.0.2 is reclaimed
   the way a spot instance is: every process of its PID namespace (its sshd, its raylet and
   Ray's other processes, the trial's worker) gets SIGKILL at once, so nothing there answers
   again, and the instance is listed as terminated where the provider lists instances (the
   local provider's state file on the head; a cloud's instance listing shows a reclaimed
   instance as terminated). The trial on 127.0.0.3 is left alone.
3. The harness stands in for the cloud: when Ray's autoscaler asks the provider for a node
   again (``create_node`` lists the IP as running), a fresh machine boots at that IP, a new PID
   namespace with an empty home and /tmp, nothing of the reclaimed one. The autoscaler's own
   updater then copies the tree to it and runs the setup and start commands, as for any node.
4. After the sweep: Ray's node list (the reclaimed node's death, the replacement), the node
   check on all three nodes (raylab imported from each node's own copy), every trial's
   result.json rows and error files from the bucket, the autoscaler's log lines about nodes.

Writes one JSON object to OUT_JSON. ``python loopback_preemption.py nodes ...`` is what step 4
runs on the head: Ray's node list, once a node at ``--ip`` other than ``--exclude`` is alive.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

STRUCK = 1
"""The index (in ``loopback_ray_up.IPS``) of the worker that is reclaimed: 127.0.0.2."""
STEPS, REPORT_EVERY, STEP_TIME_S = 400, 10, 0.2
"""Each toy trial: 400 SGD steps, a report (and, with ``checkpoint.every: 1``, a checkpoint)
every 10, 0.2 s a step: about 90 s uninterrupted on this machine."""
STRIKE_STEP = 40
"""The step both trials have reported (in the Tune driver's own result.json on the head) when
the worker is reclaimed: a trigger that needs no checkpoint, so the control run strikes alike."""
WORKER_RESOURCES = {"CPU": 1}
HERE = "~/raylab/tests/scenarios/clusters"


def sweep_command(run: str, storage: str, checkpoint_every: int) -> str:
    """The sweep, as a user runs it on the head: toy's smoke search (two trials, seeds 0 and 1)."""
    overrides = [
        f"config.steps={STEPS}",
        f"config.report_every={REPORT_EVERY}",
        f"config.step_time_s={STEP_TIME_S}",
        f"checkpoint.every={checkpoint_every}",
        "checkpoint.keep=2",
        "failure.max_failures=3",
        "resources.cpus_per_worker=1",
    ]
    return (
        f"cd ~/raylab && python -m raylab.tune toy --smoke --address auto --quiet --name {run} "
        f"--storage {shlex.quote(storage)} " + " ".join(overrides)
    )


def checkpoints_by_trial(client, run: str) -> dict[str, int]:
    """``{trial folder: highest checkpoint number}`` of a run's trials in the test bucket."""
    from s3_store import keys

    from raylab.run_folder import CHECKPOINT_PREFIX

    found: dict[str, int] = {}
    for key in keys(client, f"runs/{run}/"):
        parts = key.split("/")
        if len(parts) > 4 and parts[2] != "_raylab" and parts[3].startswith(CHECKPOINT_PREFIX):
            number = parts[3][len(CHECKPOINT_PREFIX) :]
            if number.isdigit():
                found[parts[2]] = max(found.get(parts[2], -1), int(number))
    return found


def driver_rows(root: Path, run: str) -> dict[str, list[dict]]:
    """``{trial folder: rows}`` as the Tune driver on the head has them (its staging copy of
    each trial's result.json, in the head's /tmp), before any sync to the bucket."""
    from raylab.run_folder import RESULT_FILE

    found: dict[str, list[dict]] = {}
    pattern = f"node0/tmp/ray/session_2*/artifacts/*/{run}/driver_artifacts/*/{RESULT_FILE}"
    for path in root.glob(pattern):
        rows = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line being written
                continue
        found[path.parent.name] = rows
    return found


def namespace_processes(ns: str) -> dict[int, str]:
    """``{pid: command name}`` of every live process in the PID namespace ``ns`` (a
    ``/proc/PID/ns/pid`` link's text). Zombies are left out: the node's processes, once killed,
    are orphans of this harness (its namespace's PID 1), which does not reap them."""
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.readlink(proc / "ns" / "pid") == ns:
                    state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        found[int(proc.name)] = (proc / "comm").read_text().strip()
            except (OSError, IndexError):
                continue
    return found


def reclaim(node) -> dict:
    """Every process of a node's PID namespace killed at once (SIGKILL to its PID 1, the node's
    sshd: the kernel then kills the rest), and waited for until none is left."""
    (init,) = [int(p) for p in Path(f"/proc/{node.pid}/task/{node.pid}/children").read_text().split()]
    ns = os.readlink(f"/proc/{init}/ns/pid")
    killed = namespace_processes(ns)
    os.kill(init, signal.SIGKILL)
    os.killpg(node.pid, signal.SIGKILL)
    node.wait()
    deadline = time.monotonic() + 30
    while (left := namespace_processes(ns)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {"killed": sorted(killed.values()), "left": sorted(left.values())}


def provider_state(root: Path) -> Path:
    """The local provider's instance listing, as the head's autoscaler keeps it (its /tmp)."""
    return root / "node0" / "tmp" / "ray" / f"cluster-{root.name}.state"


def read_provider_state(root: Path) -> dict:
    for _ in range(50):
        try:
            return json.loads(provider_state(root).read_text())
        except (json.JSONDecodeError, FileNotFoundError):  # mid-write: read again
            time.sleep(0.1)
    return json.loads(provider_state(root).read_text())


def list_as_terminated(root: Path, ip: str) -> dict:
    """What a cloud's instance listing shows after a reclaim: the instance terminated. Written
    under the provider's own file lock; returns the entry as it was."""
    from filelock import FileLock

    state = provider_state(root)
    with FileLock(str(state.with_name(state.name.replace(".state", ".lock")))):
        listing = json.loads(state.read_text())
        before = dict(listing[ip])
        listing[ip]["state"] = "terminated"
        state.write_text(json.dumps(listing))
    return before


def ports_held(ips: list[str]) -> list[str]:
    """The nodes' SSH ports and the head's Ray port (gpu.yaml's 6379) that something on this
    machine holds already: another loopback cluster, whose nodes share this network stack."""
    import socket

    held = []
    for ip, port in [(ip, 22) for ip in ips] + [("0.0.0.0", 6379)]:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past connections' TIME_WAIT
            try:
                sock.bind((ip, port))
            except OSError:
                held.append(f"{ip}:{port}")
    return held


def run(args) -> int:
    import loopback_ray_up as lb
    from s3_store import CREDENTIALS

    assert os.getpid() == 1 or os.environ.get("RAYLAB_LOOPBACK_NAMESPACED") == "1", (
        "run inside its own PID namespace (unshare --pid --fork --mount-proc)"
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if held := ports_held(lb.IPS[:3]):
        args.out_json.write_text(json.dumps({"error": f"another loopback cluster holds {held}: run one at a time"}))
        return 0
    lb.ensure_user()
    root = Path(tempfile.mkdtemp(prefix="raylab-preempt-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    key = root / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    stage = lb.node_python(root)
    config = yaml.safe_load(args.cluster_yaml.read_text())
    s3 = lb.start_s3()
    head_type = config.get("available_node_types", {}).get(config.get("head_node_type", ""), {})
    head_env = {"RAY_OVERRIDE_RESOURCES": json.dumps(head_type["resources"])} if head_type.get("resources") else {}
    worker_env = {"RAY_OVERRIDE_RESOURCES": json.dumps(WORKER_RESOURCES)}
    envs = [{**CREDENTIALS, **(head_env if i == 0 else worker_env)} for i in range(3)]
    nodes = [lb.start_node(root, i, key, stage, envs[i]) for i in range(3)]
    report: dict = {"source": str(args.cluster_yaml), "checkpoint_every": args.checkpoint_every}
    try:
        for ip in lb.IPS[:3]:
            lb.wait_ssh(key, ip)
        preempt(lb, config, root, key, stage, envs, nodes, s3, args, report)
    except Exception as err:  # noqa: BLE001 - reported in the JSON, with the nodes' logs
        import traceback

        report["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()[-2000:]}"
    finally:
        for proc in nodes:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        s3[0].stop()
        report["monitor_log"] = autoscaler_lines(root)
        report["sshd_logs"] = {p.name: (p / "sshd.log").read_text()[-600:] for p in sorted(root.glob("node*"))}
        shutil.rmtree(root, ignore_errors=True)
        for state in Path("/tmp/ray").glob(f"cluster-{root.name}.*"):
            state.unlink(missing_ok=True)
    args.out_json.write_text(json.dumps(report))
    return 0


def autoscaler_lines(root: Path) -> list[str]:
    """The head autoscaler's log lines about launching, losing, updating and ending nodes."""
    words = ("Queue", "aunch", "updater", "Removed ip: 127", "heartbeat", "Restarting", "lost contact", "erminating")
    # (Ray's log lines have " -- " after their source; the rsync file lists between them do not.)
    lines = []
    for log in sorted(root.glob("node0/tmp/ray/session_2*/logs/monitor.*")):
        if log.suffix in (".log", ".out", ".err"):
            text = log.read_text(errors="replace").splitlines()
            lines += [f"{log.name}: {ln[:300]}" for ln in text if " -- " in ln and any(w in ln for w in words)]
    return lines[-80:]


def head_nodes(lb, cfg: Path, alive: int = 0, ip: str = "", exclude: str = "", timeout: float = 0) -> list[dict]:
    """Ray's node list, read on the head, once ``alive`` nodes are alive, one of them at ``ip``
    and other than ``exclude``."""
    command = f"python {HERE}/loopback_preemption.py nodes --alive {alive} --timeout {timeout}"
    if ip:
        command += f" --ip {ip} --exclude {exclude or 'none'}"
    proc = lb.ray_cli("exec", str(cfg), command, timeout=timeout + 300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("NODES ")), None)
    if line is None:
        raise RuntimeError(f"no node list from the head: {(proc.stdout + proc.stderr)[-2000:]}")
    return json.loads(line[len("NODES ") :])


def local_form(lb, config: dict, key: Path, name: str) -> dict:
    """The YAML's loopback form on Ray's ``local`` provider: head and two workers (``IPS[:3]``),
    every worker running the YAML's ``setup_commands``; its node-type list left out (the head's
    resources reach its ``ray start`` from ``run``). The local provider keeps its instance listing
    in a file on the head, which the reclaim marks as a cloud's listing would."""
    without_types = {k: v for k, v in config.items() if k not in ("available_node_types", "head_node_type")}
    derived = lb.derive(without_types, key, name)
    derived["provider"] = {"type": "local", "head_ip": lb.IPS[0], "worker_ips": lb.IPS[1:3]}
    derived["max_workers"] = 2
    return derived


def preempt(lb, config, root: Path, key: Path, stage: Path, envs, nodes, s3, args, report: dict) -> None:
    cfg = root / "cluster.yaml"
    cfg.write_text(yaml.safe_dump(local_form(lb, config, key, root.name), sort_keys=False))
    t0 = time.monotonic()
    up = lb.ray_cli("up", str(cfg), "--yes", "--no-config-cache")
    report["up"] = {"rc": up.returncode, "s": round(time.monotonic() - t0, 1), "tail": (up.stdout + up.stderr)[-4000:]}
    if up.returncode != 0:
        return
    before = head_nodes(lb, cfg, alive=3, timeout=300)  # both workers up
    struck_ip = lb.IPS[STRUCK]
    alive = [n for n in before if n["state"] == "ALIVE"]
    report["nodes_before"] = before
    (struck_node,) = [n["node_id"] for n in alive if n["node_ip"] == struck_ip] or [None]
    if struck_node is None or len(alive) < 3:
        raise RuntimeError(f"the workers did not both join: {before}")
    report["struck"] = {"ip": struck_ip, "node_id": struck_node}
    run_name = "preempted"
    client = s3[2]
    sweep: dict = {}

    def sweep_thread() -> None:
        started = time.time()
        proc = lb.ray_cli("exec", str(cfg), sweep_command(run_name, s3[1], args.checkpoint_every), timeout=1500)
        sweep.update(rc=proc.returncode, started=started, ended=time.time(), tail=(proc.stdout + proc.stderr)[-4000:])

    thread = threading.Thread(target=sweep_thread, daemon=True)
    thread.start()
    deadline = time.monotonic() + 600
    last: dict[str, dict] = {}
    while thread.is_alive() and time.monotonic() < deadline:
        last = {t: rows[-1] for t, rows in driver_rows(root, run_name).items() if rows}
        if len(last) == 2 and all(r.get("train/step", 0) >= STRIKE_STEP for r in last.values()):
            break
        time.sleep(0.5)
    else:
        thread.join(timeout=5)
        raise RuntimeError(f"never struck: driver rows {last}, sweep {sweep.get('tail', '')[-2000:]}")
    on = sorted(r.get("node_ip") for r in last.values())
    if on != sorted(lb.IPS[1:3]):
        raise RuntimeError(f"the two trials are not one on each worker: {on}")
    # The reclaim: the instance's processes end at once, then the cloud lists it as terminated.
    struck_at = time.time()
    killed = reclaim(nodes[STRUCK])
    listed = list_as_terminated(root, struck_ip)
    report["struck"].update(
        at=struck_at,
        rows_at_strike={t: {"step": r["train/step"], "node_ip": r["node_ip"]} for t, r in last.items()},
        checkpoints_at_strike=checkpoints_by_trial(client, run_name),
        listing_before=listed,
        **killed,
    )
    # The cloud's part: a fresh instance boots at that IP when the autoscaler creates one.
    launch_deadline = time.monotonic() + 600
    while time.monotonic() < launch_deadline:
        if read_provider_state(root).get(struck_ip, {}).get("state") == "running":
            report["launch_requested_at"] = time.time()
            (root / f"node{STRUCK}").rename(root / f"node{STRUCK}-reclaimed")
            nodes.append(lb.start_node(root, STRUCK, key, stage, envs[STRUCK]))
            report["replacement_booted_at"] = time.time()
            break
        time.sleep(0.5)
    else:
        report["launch_requested_at"] = None
    thread.join(timeout=1500)
    report["sweep"] = sweep
    after = head_nodes(lb, cfg, 3, struck_ip, struck_node, timeout=600)
    report["nodes_after"] = after
    check = lb.ray_cli("exec", str(cfg), f"python {HERE}/node_check.py --nodes 3 --timeout 300")
    line = next((ln for ln in check.stdout.splitlines() if ln.startswith("NODECHECK ")), None)
    report["node_check"] = json.loads(line[len("NODECHECK ") :]) if line else (check.stdout + check.stderr)[-2000:]
    report["trials"] = trial_rows(client, run_name)
    down = lb.ray_cli("down", str(cfg), "--yes")
    report["down"] = {"rc": down.returncode, "tail": (down.stdout + down.stderr)[-1500:]}


ROW_KEYS = ("train/step", "train/resumed_from_step", "node_ip", "node_id", "pid", "timestamp", "training_iteration")


def trial_rows(client, run: str) -> dict:
    """Per trial in the bucket: its result.json rows (the keys ``ROW_KEYS``) and the start of
    each error file Tune wrote for it."""
    from s3_store import keys

    from raylab.run_folder import ERROR_FILE, RESULT_FILE

    found: dict = {}
    for key in keys(client, f"runs/{run}/"):
        parts = key.split("/")
        if len(parts) != 4 or parts[2] == "_raylab":
            continue
        trial = found.setdefault(parts[2], {"rows": [], "errors": []})
        if parts[3] == RESULT_FILE:
            text = client.get_object(Bucket="raylab", Key=key)["Body"].read().decode()
            rows = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
            trial["rows"] = [{k: r.get(k) for k in ROW_KEYS} for r in rows]
        elif parts[3] == ERROR_FILE:
            trial["errors"].append(client.get_object(Bucket="raylab", Key=key)["Body"].read().decode()[-1500:])
    return {name: t for name, t in found.items() if t["rows"] or t["errors"]}


def nodes_main(args) -> int:
    """On the head: Ray's node list (id, IP, state, start and end times), printed as one
    ``NODES`` line once ``--alive`` nodes are, one at ``--ip`` other than ``--exclude`` (or at
    the timeout)."""
    from ray.util.state import list_nodes

    deadline = time.monotonic() + args.timeout
    while True:
        nodes = [
            {
                "node_id": n.node_id,
                "node_ip": n.node_ip,
                "state": str(n.state),
                "is_head": bool(n.is_head_node),
                "start_time_ms": n.start_time_ms,
                "end_time_ms": n.end_time_ms,
                "resources": n.resources_total,
            }
            for n in list_nodes(address="auto", detail=True, limit=1000)
        ]
        alive = [n for n in nodes if n["state"] == "ALIVE"]
        wanted = [n for n in alive if n["node_ip"] == args.ip and n["node_id"] != args.exclude]
        if (len(alive) >= args.alive and (wanted or not args.ip)) or time.monotonic() > deadline:
            break
        time.sleep(3)
    print("NODES " + json.dumps(nodes))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    go = sub.add_parser("run")
    go.add_argument("cluster_yaml", type=Path)
    go.add_argument("out_json", type=Path)
    go.add_argument("--checkpoint-every", type=int, default=1, help="reports between checkpoints (control: huge)")
    nodes = sub.add_parser("nodes")
    nodes.add_argument("--alive", type=int, default=0)
    nodes.add_argument("--ip", default="")
    nodes.add_argument("--exclude", default="")
    nodes.add_argument("--timeout", type=float, default=0)
    args = parser.parse_args()
    return run(args) if args.what == "run" else nodes_main(args)


if __name__ == "__main__":
    sys.exit(main())
