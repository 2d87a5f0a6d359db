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
    from raylab.cluster import plan
    from raylab.errors import UserError

    config, _ = filled
    head, nodes, _ = plan.load(GPU_YAML)
    assert head.trial_drivers == 24
    rows, checked, kinds = [], 0, set()
    for name, path in sorted(experiments.available().items()):
        exp = experiments.load(str(path))
        res = exp.resources
        trials = search_space.grid_size(exp.search) * exp.num_samples
        bundle = {"CPU": res.cpus_per_worker, **({"GPU": res.gpus_per_worker} if res.gpus_per_worker else {})}
        demand = min(trials, int(head.trial_drivers)) if res.uses_ray_train else trials
        if cap := plan.concurrency_cap(exp):  # a ConcurrencyLimiter: Tune makes no more trials
            demand = min(demand, cap)
        added = rays_choice(config, bundle, demand)
        planned = plan.choose(nodes, res.cpus_per_worker, res.gpus_per_worker)
        per_node = plan.trials_per_node(planned, res.cpus_per_worker, res.gpus_per_worker)
        expected = {planned.name: min(planned.max_workers, -(-demand // per_node))}
        rows.append((name, trials, bundle, added, expected))
        assert added == expected, (name, added, expected)  # --dry-run --cluster says what Ray does
        try:
            text = plan.plan_text(exp, GPU_YAML)
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
    """``plan.choose`` reproduces Ray's scorer, not only on the shipped experiments:
    for instance quarter-GPU trials of 2 CPUs go two to a g5.xlarge (half its GPU idle), of 3 or
    4 CPUs four to a g5.4xlarge (the reason the shipped quarter-GPU experiments ask 4)."""
    from raylab.cluster import plan

    config, _ = filled
    _, nodes, _ = plan.load(GPU_YAML)
    for cpus in (1, 2, 3, 4, 6, 8):
        bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
        planned = plan.choose(nodes, cpus, gpus)
        added = rays_choice(config, bundle, 8)
        assert set(added) == {planned.name}, (bundle, added, planned.name)
    if gpus == 0.25:
        assert plan.choose(nodes, 2, gpus).name == "gpu_small"
        assert plan.choose(nodes, 4, gpus).name == "gpu_shared"


def test_spot_trials_go_to_the_spot_twin_and_others_never_do(filled):
    """Every shipped GPU experiment asked both ways: with ``resources.spot`` its workers' request
    (``Resources.worker_request``: the ``spot`` ask included) makes Ray's scheduler launch the spot
    twin of the on-demand type it launches otherwise, as many nodes, and ``--dry-run --cluster``
    plans the same; without it, no spot type is launched (the unused ``spot`` resource lowers a
    spot type's score)."""
    import dataclasses

    from raylab import experiment as experiments
    from raylab import search_space
    from raylab.cluster import plan

    config, _ = filled
    head, nodes, _ = plan.load(GPU_YAML)
    spot_types = {n.name for n in nodes if n.spot}
    assert spot_types == {"gpu_small_spot", "gpu_shared_spot"}
    checked = 0
    for name, path in sorted(experiments.available().items()):
        exp = experiments.load(str(path))
        if not exp.resources.gpus_per_worker:
            continue
        trials = search_space.grid_size(exp.search) * exp.num_samples
        demand = min(trials, int(head.trial_drivers)) if exp.resources.uses_ray_train else trials
        choices = {}
        for spot in (False, True):
            res = dataclasses.replace(exp.resources, spot=spot)
            added = rays_choice(config, res.worker_request(), demand)
            planned = plan.choose(nodes, res.cpus_per_worker, res.gpus_per_worker, spot)
            assert set(added) == {planned.name}, (name, spot, added, planned.name)
            choices[spot] = added
        (on_demand, count), (spot_type, spot_count) = *choices[False].items(), *choices[True].items()
        assert on_demand not in spot_types and spot_type == f"{on_demand}_spot", (name, choices)
        assert spot_count == count, (name, choices)
        checked += 1
    assert checked >= 10


def test_a_mixed_queue_splits_by_market(filled):
    """Spot and on-demand trials queued together: Ray launches both kinds, each for its own."""
    config, _ = filled
    queue = [{"CPU": 2, "GPU": 0.5, "spot": 0.001}] * 4 + [{"CPU": 2, "GPU": 0.5}] * 4
    from ray.autoscaler._private.node_provider_availability_tracker import NodeAvailabilitySummary
    from ray.autoscaler._private.resource_demand_scheduler import _default_utilization_scorer, get_nodes_for

    scorer = partial(
        _default_utilization_scorer, node_availability_summary=NodeAvailabilitySummary(node_availabilities={})
    )
    added, infeasible = get_nodes_for(
        config["available_node_types"], {}, config["head_node_type"], config["max_workers"], queue, scorer
    )
    assert dict(added) == {"gpu_small_spot": 2, "gpu_small": 2} and not infeasible


def test_rays_own_validation_accepts_the_spot_types_and_launches_them_as_spot():
    """Ray's schema check and config preparation take gpu.yaml with its spot types, and Ray's AWS
    node provider launches a spot type's node as an EC2 spot instance (moto's EC2), the
    on-demand twin as an on-demand one."""
    import boto3
    from ray.autoscaler._private.aws.node_provider import AWSNodeProvider
    from ray.autoscaler._private.util import prepare_config, validate_config
    from ray.autoscaler.tags import TAG_RAY_NODE_KIND, TAG_RAY_USER_NODE_TYPE

    config = yaml.safe_load(GPU_YAML.read_text())
    validate_config(prepare_config(copy.deepcopy(config)))
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
    }
    with pytest.MonkeyPatch.context() as mp, moto.mock_aws():
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("AWS_PROFILE", raising=False)
        ec2 = boto3.client("ec2", region_name="us-west-2")
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
        provider = AWSNodeProvider({**config["provider"], "availability_zone": "us-west-2a"}, config["cluster_name"])
        for name in ("gpu_small", "gpu_small_spot"):
            node_config = copy.deepcopy(config["available_node_types"][name]["node_config"])
            node_config["ImageId"] = image
            node_config.pop("IamInstanceProfile")  # not made in this moto account
            node_config["SubnetIds"] = [subnet]  # what Ray's bootstrap fills in (test_aws_bootstrap.py runs it)
            provider.create_node(node_config, {TAG_RAY_NODE_KIND: "worker", TAG_RAY_USER_NODE_TYPE: name}, 1)
        launched = {
            next(t["Value"] for t in i["Tags"] if t["Key"] == TAG_RAY_USER_NODE_TYPE): i.get(
                "InstanceLifecycle", "normal"
            )
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        }
    assert launched == {"gpu_small": "normal", "gpu_small_spot": "spot"}


def rays_v2_choice(config: dict, bundle: dict, trials: int, failed: tuple[str, ...] = ()) -> dict[str, int]:
    """Node types (and counts) Ray's v2 autoscaler scheduler launches for ``trials`` queued
    ``bundle``s, with the types in ``failed`` just refused by the cloud (their availability 0,
    as after an InsufficientInstanceCapacity error)."""
    from ray.autoscaler.v2.instance_manager.config import AutoscalingConfig
    from ray.autoscaler.v2.scheduler import ResourceDemandScheduler, SchedulingRequest
    from ray.core.generated.autoscaler_pb2 import ResourceRequest, ResourceRequestByCount

    autoscaling = AutoscalingConfig(copy.deepcopy(config), skip_content_hash=True)
    unavailable = dict.fromkeys(failed, 0.0)
    reply = ResourceDemandScheduler().schedule(
        SchedulingRequest(
            disable_launch_config_check=True,
            node_type_configs=autoscaling.get_node_type_configs(),
            max_num_nodes=autoscaling.get_max_num_nodes(),
            resource_requests=[ResourceRequestByCount(request=ResourceRequest(resources_bundle=bundle), count=trials)],
            cloud_resource_availabilities=unavailable,
            recoverable_resource_availabilities=unavailable,
        )
    )
    launched: dict[str, int] = {}
    for launch in reply.to_launch:
        launched[launch.instance_type] = launched.get(launch.instance_type, 0) + launch.count
    return launched


def test_v2_keeps_spot_trials_on_spot_when_spot_fails_and_priority_falls_back_only_for_equal_types():
    """What Ray's v2 autoscaler (the default of `ray up` on AWS) does with gpu.yaml's spot types,
    and why ``priority`` cannot be raylab's fallback. As shipped: on-demand trials get gpu_small,
    spot trials gpu_small_spot, and still gpu_small_spot right after AWS refused it (no
    fallback: only spot types hold the ``spot`` ask). Control, the priority design: spot types
    without the ``spot`` resource and with ``priority: 1`` do fall back to on-demand after a
    refusal, but then every GPU trial, spot or not, goes to spot first."""
    config = yaml.safe_load(GPU_YAML.read_text())
    half = {"CPU": 2, "GPU": 0.5}
    assert rays_v2_choice(config, half, 8) == {"gpu_small": 4}
    assert rays_v2_choice(config, {**half, "spot": 0.001}, 8) == {"gpu_small_spot": 4}
    assert rays_v2_choice(config, {**half, "spot": 0.001}, 8, failed=("gpu_small_spot",)) == {"gpu_small_spot": 4}

    priority = copy.deepcopy(config)
    for name in ("gpu_small_spot", "gpu_shared_spot"):
        priority["available_node_types"][name]["resources"].pop("spot")
        priority["available_node_types"][name]["priority"] = 1
    assert rays_v2_choice(priority, half, 8) == {"gpu_small_spot": 4}  # every trial goes to spot
    assert rays_v2_choice(priority, half, 8, failed=("gpu_small_spot",)) == {"gpu_small": 4}  # fallback
