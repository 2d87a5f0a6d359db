"""Run on a cluster's head (``ray exec CLUSTER "python ~/raylab/tests/cluster/node_check.py N"``):
wait until N nodes are alive, then run one task pinned to each node that imports raylab,
raylab.data and every registered workload's config, loop and preflight there, and print one
``NODECHECK {json}`` line saying, per node, where those modules were imported from."""

from __future__ import annotations

import json
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
def probe() -> dict:
    import os

    import raylab
    import raylab.data
    from raylab import workloads

    names = sorted(workloads.registry())
    for name in names:
        workload = workloads.get(name)
        workload.config_class(), workload.train_loop(), workload.preflight_check()
    return {"node": ray.get_runtime_context().get_node_id(), "raylab": list(raylab.__path__),
            "raylab_data": raylab.data.__file__, "workloads": names,
            "home": os.path.expanduser("~")}


def main() -> None:
    want = int(sys.argv[1])
    ray.init(address="auto")
    deadline = time.monotonic() + float(sys.argv[2] if len(sys.argv) > 2 else 600)
    while True:
        alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        if len(alive) >= want or time.monotonic() > deadline:
            break
        time.sleep(2)
    on = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
          for n in alive]
    print("NODECHECK " + json.dumps(ray.get(on)))


if __name__ == "__main__":
    main()
