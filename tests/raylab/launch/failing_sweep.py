"""``python tests/raylab/launch/failing_sweep.py EXPERIMENT.yaml [ARGS]``: ``python -m raylab.tune`` with
workload ``toy_failing`` (toy's config, ``tests.raylab.launch.failing_loop``, which fails on every
attempt) registered first, as a lab's entry point would register it."""

import sys

from raylab.launch import ray_start

ray_start.bind_to_loopback_unless_asked(sys.argv[1:])

from raylab import tune, workloads  # noqa: E402
from raylab.workloads import Workload  # noqa: E402

toy = workloads.get("toy")
workloads.registry()["toy_failing"] = Workload(
    config=toy.config, loop="tests.raylab.launch.failing_loop:train_loop", metrics=toy.metrics
)
sys.exit(tune.main(sys.argv[1:]))
