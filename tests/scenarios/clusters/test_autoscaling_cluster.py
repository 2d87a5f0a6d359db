"""The simulated autoscaling cluster's YAML (tests/scenarios/clusters/fake_cluster.py) is one Ray accepts,
in the shape of ``cluster/gpu.yaml``: its head's resources, worker types declaring GPUs."""

from __future__ import annotations

from scenarios.clusters.fake_cluster import autoscaling_config


def test_the_simulated_cluster_passes_rays_validation_in_gpu_yamls_shape():
    from ray.autoscaler._private.util import validate_config

    config = autoscaling_config(port=6379, gpu_nodes=2, idle_timeout_s=6)
    validate_config(config)
    head = config["available_node_types"]["ray.head.default"]["resources"]
    assert head["CPU"] == 0 and head["trial_driver"] >= 1
    workers = [t for name, t in config["available_node_types"].items() if name != "ray.head.default"]
    assert workers and all(t["resources"]["GPU"] >= 1 for t in workers)
