"""Run the toy smoke sweep on a two-node Ray cluster made on this machine; print JSON facts.

Used by tests/scenarios/clusters/test_cluster.py in its own process (a cluster cannot share a process with
the test session's Ray).  Usage: python tests/scenarios/clusters/two_node_sweep.py STORAGE_DIR
"""

import json
import logging
import sys

import ray
from ray.cluster_utils import Cluster

from raylab import experiment as experiments
from raylab.experiment import new_run_name
from raylab.launch import sweep
from raylab.run_folder import RunFolder

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
cluster.add_node(num_cpus=1)
cluster.wait_for_nodes()
ray.init(address=cluster.address, logging_level=logging.ERROR)
# Each trial holds one CPU and runs long enough that both must run at the same time.
experiment = experiments.load("toy", ["config.step_time_s=0.02", "search.seed=[0, 1]"], smoke=True)
results = sweep.run(experiment, RunFolder.under(sys.argv[1], new_run_name(experiment)), verbose=0).results
print(
    json.dumps(
        {
            "trials": len(results),
            "errors": sum(r.error is not None for r in results),
            "trial_nodes": [r.metrics.get("node_id") for r in results],
            "cluster_nodes": [n["NodeID"] for n in ray.nodes() if n["Alive"]],
        }
    )
)
ray.shutdown()
cluster.shutdown()
