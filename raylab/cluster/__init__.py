"""Cluster tooling: what runs before a cluster exists or on its nodes, never the sweep itself.

- ``plan``: what ``python -m raylab.tune NAME --dry-run --cluster FILE`` prints: the node type
  the trials go to, how many run at once, the sweep's hours and dollars; ``prices``: the price
  and spot-preemption model it prints (pure functions), with the spot trials' failure budget
  that the sweep uses.
- ``setup_guard``: ``python -m raylab.cluster.setup_guard``, on a cluster's head: stop
  relaunching a node type whose setup keeps failing.
- ``node_gpu``: ``python -m raylab.cluster.node_gpu``, on a GPU node at setup: can this node's
  GPU run the installed torch?

The commands and the driver (``raylab.launch``) may import this package; it imports nothing of
``raylab.launch`` or the commands, and the workload API and the experiment spec import nothing
of it (``tests/raylab/test_layering.py``).
"""

DRIVER_RESOURCE = "trial_driver"
"""A custom resource a cluster's head may declare (``cluster/gpu.yaml``): a Ray Train trial's
driver, and the Train controller it starts on its node, then run on the head, which the
autoscaler never removes, instead of on a worker node that may be lost or scaled down
(``raylab.launch.trainable``). Where the head declares it, at most that many Ray Train trials
run at once."""
