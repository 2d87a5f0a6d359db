"""A GPU sweep on a simulated autoscaling cluster (Ray's fake multi-node provider).

The cluster starts with a head only (no trial CPUs, no GPUs), as ``cluster/gpu.yaml``'s does.
``python -m raylab.tune --address auto`` must queue every trial so the autoscaler sees the
whole demand: it adds GPU nodes, trials run side by side on them, and the nodes go once idle.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

import pytest
from scenarios.clusters.fake_cluster import fake_cluster

from raylab.run_folder import RunFolder

SWEEP = [
    "toy",
    "--smoke",
    "--address",
    "auto",
    "--quiet",
    "resources.gpus_per_worker=1",
    "resources.cpus_per_worker=1",
    "search.seed=[0,1,2,3]",
    "config.steps=60",
    "config.report_every=10",
    "config.step_time_s=0.1",
]


def trial_rows(run: Path) -> dict[str, list[dict]]:
    return {trial.name: trial.rows() for trial in RunFolder(run).trials()}


@pytest.mark.slow
@pytest.mark.long
def test_gpu_sweep_scales_out_runs_side_by_side_and_scales_back_in(tmp_path):
    results = tmp_path / "results"
    with fake_cluster(gpu_nodes=2, idle_timeout_s=6) as cluster:
        head_only = cluster.alive_nodes()
        assert len(head_only) == 1 and head_only[0]["resources"].get("GPU", 0) == 0

        # A local folder is refused on a joined cluster unless declared shared (one line)...
        refused = cluster.run(sys.executable, "-m", "raylab.tune", *SWEEP, "--storage", str(results))
        assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0, refused.stderr
        assert "--shared-storage" in refused.stderr and not results.exists()

        # ...which it is here: every fake node is a process on this machine.
        proc = cluster.run(
            sys.executable,
            "-m",
            "raylab.tune",
            *SWEEP,
            "--storage",
            str(results),
            "--shared-storage",
            "--name",
            "fake",
            timeout=480,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

        run = results / "fake"
        statuses = [row["status"] for row in csv.DictReader((run / "summary.csv").open())]
        assert statuses == ["TERMINATED"] * 4
        rows = trial_rows(run)
        assert len(rows) == 4 and all(r[-1]["train/step"] == 60 for r in rows.values())
        nodes = {row["node_id"] for trial in rows.values() for row in trial}
        head = head_only[0]["id"]
        assert head not in nodes and len(nodes) >= 2, nodes  # trials ran on added GPU nodes
        spans = sorted((t[0]["timestamp"], t[-1]["timestamp"]) for t in rows.values())
        overlapping = any(b[0] < a[1] for a, b in zip(spans, spans[1:]))
        assert overlapping, spans  # at least two trials ran at the same time

        deadline = time.monotonic() + 120
        while len(alive := cluster.alive_nodes()) > 1 and time.monotonic() < deadline:
            time.sleep(5)
        assert [n["id"] for n in alive] == [head]  # idle GPU nodes removed
