"""Run on a cluster's head (``ray exec CLUSTER "python ~/raylab/tests/scenarios/clusters/node_check.py
--nodes N"``): wait until N nodes are alive, then run one task pinned to each node that imports
raylab, raylab.data and every registered workload's config, loop and preflight function there
and, on worker nodes, runs the preflight of each ``--preflight`` experiment's smoke form (what its
smoke sweep's trials check on that node). Prints one ``NODECHECK {json}`` line: per node, its IP,
where those modules were imported from, each preflight's outcome (``ok`` or the refusal's line)
which ``--expect`` files it sees and the
resources its Ray node has. ``--wait-only`` only waits."""

from __future__ import annotations

import argparse
import json
import os
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
def probe(experiments: list[str], expect: list[str]) -> dict:
    import raylab
    import raylab.data
    from raylab import experiment, workloads
    from raylab.launch import checks

    home = os.path.expanduser("~")
    os.chdir(os.path.join(home, "raylab"))  # where docs/cluster.md's commands run from
    names = sorted(workloads.registry())
    for name in names:
        workload = workloads.get(name)
        workload.config_class(), workload.train_loop(), workload.preflight_check()
    preflights = {}
    for name in experiments:
        try:
            checks.preflight(experiment.load(name, smoke=True))
            preflights[name] = "ok"
        except Exception as err:  # noqa: BLE001 - reported per experiment
            preflights[name] = f"{type(err).__name__}: {err}"
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "ip": ray.util.get_node_ip_address(),
        "raylab": list(raylab.__path__),
        "raylab_data": raylab.data.__file__,
        "workloads": names,
        "home": home,
        "preflight": preflights,
        "files": {path: os.path.exists(os.path.expanduser(path)) for path in expect},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--preflight", default="", help="comma-separated experiment names")
    parser.add_argument("--expect", action="append", default=[], help="a file every node should see")
    parser.add_argument("--wait-only", action="store_true", help="only wait for the nodes")
    args = parser.parse_args()
    ray.init(address="auto")
    deadline = time.monotonic() + args.timeout
    while True:
        nodes = [n for n in ray.nodes() if n["Alive"]]
        if len(nodes) >= args.nodes or time.monotonic() > deadline:
            break
        time.sleep(2)
    if args.wait_only:
        print(f"NODES {len(nodes)}")
        return
    head = ray.get_runtime_context().get_node_id()  # this driver runs on the head
    experiments = [e for e in args.preflight.split(",") if e]
    on = [
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
            experiments if n["NodeID"] != head else [], args.expect
        )
        for n in nodes
    ]
    found = ray.get(on)
    resources = {n["NodeID"]: n["Resources"] for n in nodes}
    for row in found:
        row["kind"] = "head" if row["node"] == head else "worker"
        row["resources"] = {k: v for k, v in resources[row["node"]].items() if not k.startswith("node:")}
    print("NODECHECK " + json.dumps(found))


if __name__ == "__main__":
    main()
