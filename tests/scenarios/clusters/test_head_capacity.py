"""Trials at once on a simulated cluster equal what ``--dry-run --cluster`` computes for it, and
storage credentials reach trials.

On a simulated autoscaling cluster (``tests/scenarios/clusters/fake_cluster.py``) whose head declares
``trial_driver: 1`` and whose one GPU node holds 4 (fake) GPUs, two sweeps larger than the head's
cap run one after the other, and the most trials running at once (live ``ImplicitFunc`` actors:
each running trial has one, a Tune trial or a Ray Train trial's driver; read from Ray's public
state API) must equal the trials at once that ``python -m raylab.tune ... --dry-run --cluster``
prints for the same cluster file:

- 6 one-GPU trials run on the Tune path: bounded by the 4 GPUs, not by the head (4 at once,
  every trial's process on the GPU node, none on the head);
- 2 Ray Train trials of two one-GPU workers: each driver holds the head's one ``trial_driver``,
  so 1 at a time although the GPUs allow 2 (and at most 1 ``TrainController`` alive).

The sweeps check the storage credentials too: the cluster's processes were started without
AWS variables, the CLI has them, and no process's environment holds them (trials read them from a
file on their node, ``raylab/launch/storage_secrets.py``) while no file the run saves in the bucket
holds them. The Ray Train sweep also
measures each Ray Train trial's private memory on the head, by actor class.
Behind ``RAYLAB_FULL_CLUSTER=1`` (several minutes on 2 cores).
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from scenarios.clusters.conftest import CREDENTIALS
from scenarios.clusters.fake_cluster import fake_cluster
from scenarios.clusters.s3_store import keys

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("RAYLAB_FULL_CLUSTER") != "1", reason="set RAYLAB_FULL_CLUSTER=1 (several minutes on 2 cores)"
    ),
]

REPO = Path(__file__).resolve().parents[3]
TOKEN = "raylab-test-session-token-5f2c"  # AWS_SESSION_TOKEN, set for the CLI only
HEAD_TRIAL_CLASSES = (
    "ImplicitFunc",
    "TrainController",
    "Mailbox",
    "PlacementGroupCleaner",
    "DatasetManager",
    "SynchronizationActor",
)
SHORT = ["config.steps=40", "config.report_every=10", "config.step_time_s=0.25"]
ONE_GPU = ["resources.gpus_per_worker=1", "resources.cpus_per_worker=1", "search.seed=[0,1,2,3,4,5]", *SHORT]
TWO_WORKERS = [
    "resources.workers=2",
    "resources.gpus_per_worker=1",
    "resources.cpus_per_worker=1",
    "search.seed=[0,1]",
    *SHORT,
]


def private_mib(pid: int) -> float | None:
    """A process's private memory (Private_Clean + Private_Dirty of smaps_rollup), MiB."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kib = sum(
        int(line.split()[1]) for line in text.splitlines() if line.startswith(("Private_Clean:", "Private_Dirty:"))
    )
    return kib / 1024


def has_token(pid: int) -> bool | None:
    try:
        return TOKEN.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None


@dataclass
class Watched:
    """What one sweep's polling of Ray's state API saw."""

    most_trials: int = 0
    """The most live ``ImplicitFunc`` actors at once: trials running (either path)."""
    most_controllers: int = 0
    trial_nodes: set = field(default_factory=set)
    """The nodes the ``ImplicitFunc`` actors ran on."""
    token_seen: dict = field(default_factory=lambda: defaultdict(set))
    memory: dict = field(default_factory=lambda: defaultdict(float))
    """Actor class -> the most private MiB one process of it had (head classes)."""
    output: str = ""
    returncode: int | None = None


def dry_run_at_once(cluster_file: Path, overrides: list[str]) -> int:
    """The trials at once that ``--dry-run --cluster`` prints for ``overrides`` on ``cluster_file``."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "raylab.tune",
            "toy",
            "--smoke",
            "--dry-run",
            "--cluster",
            str(cluster_file),
            *overrides,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    found = re.search(r"(\d+) of (\d+) trials at once", proc.stdout)
    assert found, proc.stdout[-3000:] + proc.stderr[-3000:]
    return int(found.group(1))


def sweep_and_watch(cluster, env: dict, storage: str, name: str, overrides: list[str], deadline: float) -> Watched:
    """Run one sweep through the CLI on ``cluster``; poll Ray's state API every second while it runs."""
    from ray.util.state import list_actors

    proc = subprocess.Popen(
        [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--address", "auto", "--quiet"]
        + ["--storage", storage, "--name", name, *overrides],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = Watched()
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                actors = list_actors(
                    address=cluster.dashboard,
                    filters=[("state", "=", "ALIVE")],
                    limit=1000,
                    raise_on_missing_output=False,
                )
            except Exception:  # noqa: BLE001 - the state API is not up yet
                time.sleep(1)
                continue
            trials = [a for a in actors if a.class_name == "ImplicitFunc"]
            seen.most_trials = max(seen.most_trials, len(trials))
            seen.trial_nodes |= {a.node_id for a in trials}
            seen.most_controllers = max(seen.most_controllers, sum(a.class_name == "TrainController" for a in actors))
            for actor in actors:
                if not actor.pid:
                    continue
                if actor.class_name in ("ImplicitFunc", "RayTrainWorker"):
                    seen.token_seen[actor.class_name].add(has_token(actor.pid))
                if actor.class_name in HEAD_TRIAL_CLASSES:
                    seen.memory[actor.class_name] = max(seen.memory[actor.class_name], private_mib(actor.pid) or 0.0)
            time.sleep(1)
        seen.output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    seen.returncode = proc.returncode
    return seen


def statuses(client, name: str) -> list[str]:
    (summary,) = [k for k in keys(client, f"runs/{name}/") if k.endswith("summary.csv")]
    rows = csv.DictReader(io.StringIO(client.get_object(Bucket="raylab", Key=summary)["Body"].read().decode()))
    return [r["status"] for r in rows]


def test_trials_at_once_equal_the_dry_run_and_credentials_reach_trials(counting_s3_server):
    from ray.util.state import list_nodes

    storage, client, _ = counting_s3_server
    secret_keys = (*CREDENTIALS, "AWS_SESSION_TOKEN")
    started = time.monotonic()
    with fake_cluster(
        gpu_nodes=1, gpus_per_node=4, head={"trial_driver": 1}, unset=secret_keys, idle_timeout_s=60
    ) as cluster:
        cluster_file = cluster.root / "cluster.yaml"  # the description the simulated cluster runs
        planned = {
            "one_gpu": dry_run_at_once(cluster_file, ONE_GPU),
            "two_workers": dry_run_at_once(cluster_file, TWO_WORKERS),
        }
        env = {**cluster.env, **CREDENTIALS, "AWS_SESSION_TOKEN": TOKEN}
        deadline = started + 1200
        one_gpu = sweep_and_watch(cluster, env, storage, "one-gpu", ONE_GPU, deadline)
        two_workers = sweep_and_watch(cluster, env, storage, "two-workers", TWO_WORKERS, deadline)
        head = {n.node_id for n in list_nodes(address=cluster.dashboard) if n.is_head_node}
        raylet_pids = [p for p in cluster.pids() if b"raylet" in Path(f"/proc/{p}/cmdline").read_bytes()]
        raylets_have_token = {has_token(p) for p in raylet_pids}
    elapsed = time.monotonic() - started
    print(
        f"dry-run trials at once {planned}; most running: one-GPU {one_gpu.most_trials}, two-worker "
        f"{two_workers.most_trials} (TrainControllers {two_workers.most_controllers}); "
        f"private MiB per head actor of a Ray Train trial: {dict(two_workers.memory)} "
        f"(sum {sum(two_workers.memory.values()):.0f}); {elapsed:.0f} s"
    )
    assert one_gpu.returncode == 0, one_gpu.output[-4000:]
    assert two_workers.returncode == 0, two_workers.output[-4000:]
    assert statuses(client, "one-gpu") == ["TERMINATED"] * 6
    assert statuses(client, "two-workers") == ["TERMINATED"] * 2

    # What the dry-run computes is what the cluster ran: 4 one-GPU trials at once (the GPUs
    # bound them; the head's cap of 1 does not), 1 Ray Train trial (the cap binds; GPUs allow 2).
    assert planned == {"one_gpu": 4, "two_workers": 1}
    assert one_gpu.most_trials == planned["one_gpu"]
    assert two_workers.most_trials == planned["two_workers"] and two_workers.most_controllers == 1
    assert one_gpu.most_controllers == 0 and head and not one_gpu.trial_nodes & head  # nothing on the head

    # No process's environment ever held the token: the cluster's own were started without it,
    # the trials' get the keys from a file on their node (raylab/launch/storage_secrets.py; that
    # they reach S3 with them: test_secrets_out_of_job_list.py).
    assert raylet_pids and raylets_have_token == {False}
    assert one_gpu.token_seen["ImplicitFunc"] == {False}
    assert two_workers.token_seen["ImplicitFunc"] == {False} and two_workers.token_seen["RayTrainWorker"] == {False}
    # Nothing the runs saved holds a credential (experiment.yaml, tuner.pkl, params, results).
    stored = keys(client, "runs/")
    assert any(k.endswith("/experiment.yaml") for k in stored)
    for key in stored:
        body = client.get_object(Bucket="raylab", Key=key)["Body"].read()
        assert TOKEN.encode() not in body, key
