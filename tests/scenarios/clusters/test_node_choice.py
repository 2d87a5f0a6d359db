"""What Ray's autoscaler launches for each shipped experiment on cluster/gpu.yaml.

Ray 2.60's own node-type scheduler (``resource_demand_scheduler.get_nodes_for`` with its default
utilization scorer) runs on gpu.yaml's node types, their resources filled in by Ray's AWS
provider from moto's EC2 instance-type data (as the autoscaler fills them), for each experiment's
dry-run trial count queued at once (for Ray Train trials, as many as the head has
``trial_driver`` units: only trials whose driver runs ask for worker resources). It must pick
the type and count that ``--dry-run --cluster`` prints, and a type that the shipped GPU shares
fill: every GPU of the node busy with trials of that share (the packing the shares ask for).
"""

from __future__ import annotations

import copy
from functools import partial
from pathlib import Path

import pytest
import yaml

pytest.importorskip("boto3")
moto = pytest.importorskip("moto")

REPO = Path(__file__).resolve().parents[3]
GPU_YAML = REPO / "cluster" / "gpu.yaml"


@pytest.fixture(scope="module")
def filled():
    """gpu.yaml's node types with the resources Ray's AWS provider detects (moto's EC2)."""
    from ray.autoscaler._private.aws.node_provider import AWSNodeProvider

    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("AWS_PROFILE", raising=False)
        with moto.mock_aws():
            config = yaml.safe_load(GPU_YAML.read_text())
            # A multi-GPU type, as gpu.yaml had: the control below shows why it is gone.
            control = copy.deepcopy(config)
            control["available_node_types"]["gpu_8x"] = {
                "min_workers": 0,
                "max_workers": 2,
                "resources": {},
                "node_config": {"InstanceType": "p4d.24xlarge"},
            }
            return (
                AWSNodeProvider.fillout_available_node_types_resources(config),
                AWSNodeProvider.fillout_available_node_types_resources(control),
            )


def rays_choice(config: dict, bundle: dict, trials: int) -> dict[str, int]:
    """Node types (and counts) Ray's scheduler adds for ``trials`` queued ``bundle``s."""
    from ray.autoscaler._private.node_provider_availability_tracker import NodeAvailabilitySummary
    from ray.autoscaler._private.resource_demand_scheduler import _default_utilization_scorer, get_nodes_for

    scorer = partial(
        _default_utilization_scorer, node_availability_summary=NodeAvailabilitySummary(node_availabilities={})
    )
    added, _ = get_nodes_for(
        config["available_node_types"],
        {},
        config["head_node_type"],
        config["max_workers"],
        [dict(bundle) for _ in range(trials)],
        scorer,
    )
    return dict(added)


def test_control_a_multi_gpu_type_takes_single_gpu_trials(filled):
    """Positive control: with gpu.yaml's former p4d.24xlarge type the scheduler launches it first
    for dqn_softlinf's half-GPU trials (the instrument sees the bad choice)."""
    _, control = filled
    added = rays_choice(control, {"CPU": 6, "GPU": 0.5}, 126)
    print(added)
    assert added.get("gpu_8x", 0) == 2


def test_every_shipped_gpu_experiment_goes_to_its_intended_node_type(filled):
    from raylab import experiment as experiments
    from raylab import search_space
    from raylab.errors import UserError
    from raylab.launch import cluster_plan

    config, _ = filled
    head, nodes, _ = cluster_plan.load(GPU_YAML)
    assert head.trial_drivers == 24
    rows, checked, kinds = [], 0, set()
    for name, path in sorted(experiments.available().items()):
        exp = experiments.load(str(path))
        res = exp.resources
        trials = search_space.grid_size(exp.search) * exp.num_samples
        bundle = {"CPU": res.cpus_per_worker, **({"GPU": res.gpus_per_worker} if res.gpus_per_worker else {})}
        demand = min(trials, int(head.trial_drivers)) if res.uses_ray_train else trials
        added = rays_choice(config, bundle, demand)
        planned = cluster_plan.choose(nodes, res.cpus_per_worker, res.gpus_per_worker)
        per_node = cluster_plan.trials_per_node(planned, res.cpus_per_worker, res.gpus_per_worker)
        expected = {planned.name: min(planned.max_workers, -(-demand // per_node))}
        rows.append((name, trials, bundle, added, expected))
        assert added == expected, (name, added, expected)  # --dry-run --cluster says what Ray does
        try:
            text = cluster_plan.plan_text(exp, GPU_YAML)
            assert f"at the cap {expected[planned.name]} x {planned.name} (of" in text, text
        except UserError as err:  # a trial larger than the node's memory: refused, not priced
            assert name == "dqn_softlinf_rllib" and "GB of memory" in str(err), err
        if res.gpus_per_worker:
            checked += 1
            assert res.workers == 1, name
            assert res.gpus_per_worker <= 0.5, (name, "a GPU trial asks for the share it uses")
            assert planned.gpus and per_node * res.gpus_per_worker == planned.gpus, (name, planned, per_node)
            kinds.add(planned.name)
        else:
            assert set(added) == {"cpu"}, (name, bundle, added)
    for row in rows:
        print(*row, sep="\t")
    assert checked >= 10
    assert kinds == {"gpu_small", "gpu_shared"}  # 2 CPU half-GPU trials pack the small type


@pytest.mark.parametrize("gpus", [0, 0.25, 0.5, 1])
def test_plan_agrees_with_rays_scorer_beyond_the_shipped_shapes(filled, gpus):
    """``cluster_plan.choose`` reproduces Ray's scorer, not only on the shipped experiments:
    for instance quarter-GPU trials of 2 CPUs go two to a g5.xlarge (half its GPU idle), of 3 or
    4 CPUs four to a g5.4xlarge (the reason the shipped quarter-GPU experiments ask 4)."""
    from raylab.launch import cluster_plan

    config, _ = filled
    _, nodes, _ = cluster_plan.load(GPU_YAML)
    for cpus in (1, 2, 3, 4, 6, 8):
        bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
        planned = cluster_plan.choose(nodes, cpus, gpus)
        added = rays_choice(config, bundle, 8)
        assert set(added) == {planned.name}, (bundle, added, planned.name)
    if gpus == 0.25:
        assert cluster_plan.choose(nodes, 2, gpus).name == "gpu_small"
        assert cluster_plan.choose(nodes, 4, gpus).name == "gpu_shared"
