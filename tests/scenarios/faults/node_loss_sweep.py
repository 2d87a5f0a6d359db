"""Remove the node running a trial; the trial finishes on the other node from its checkpoint.

Runs in its own process (a multi-node cluster cannot share a process with the test session's
Ray) and prints one JSON line of facts for tests/scenarios/faults/test_node_loss.py.
Usage: python tests/scenarios/faults/node_loss_sweep.py STORAGE_DIR
"""

import json
import logging
import sys
from pathlib import Path

import ray
from faults import has_checkpoint_and_step, strike_when, trial_rows
from ray.cluster_utils import Cluster

from raylab import experiment as experiments
from raylab.launch import sweep
from raylab.run_folder import RunFolder

storage = Path(sys.argv[1])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
cluster.wait_for_nodes()
ray.init(address=cluster.address, logging_level=logging.ERROR)

overrides = ["search.seed=[0]", "config.steps=200", "config.step_time_s=0.03", "failure.max_failures=3"]
experiment = experiments.load("toy", overrides, smoke=True)
reference = sweep.run(experiment, RunFolder.under(str(storage), "reference"), verbose=0).results

removed = []


def remove_node(trial_dir, rows):
    node = next(n for n in workers if n.node_id == rows[-1]["node_id"])
    removed.append({"node_id": node.node_id, "step": rows[-1]["train/step"]})
    cluster.remove_node(node, allow_graceful=False)


watcher = strike_when(storage / "faulty", has_checkpoint_and_step(80), remove_node)
faulty = sweep.run(experiment, RunFolder.under(str(storage), "faulty"), verbose=0).results
watcher.join(timeout=5)
(rows,) = trial_rows(storage / "faulty").values()
print(
    json.dumps(
        {
            "removed": removed,
            "error": str(faulty[0].error) if faulty[0].error else None,
            "reference": {k: reference[0].metrics[k] for k in ("eval/mse", "train/loss", "train/step")},
            "faulty": {k: faulty[0].metrics.get(k) for k in ("eval/mse", "train/loss", "train/step")},
            "rows": [{k: r[k] for k in ("node_id", "train/step", "pid")} for r in rows],
        }
    )
)
ray.shutdown()
cluster.shutdown()
