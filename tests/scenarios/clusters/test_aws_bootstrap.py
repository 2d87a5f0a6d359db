"""Ray's AWS bootstrap of cluster/gpu.yaml against moto's EC2, IAM and SSM mocks (no cloud).

`ray up` first runs Ray's provider bootstrap: instance profiles, key pair, subnets, security
group rules, image check. These tests run that exact code (Ray 2.60's
``ray/autoscaler/_private/aws/config.py``) on the shipped YAML, with the two instance
profiles created the way docs/cluster.md tells a user to create them, then launch one node of
every type through Ray's own AWS node provider. What moto cannot show: that EC2 resolves the
``resolve:ssm:`` image parameter (moto does not, and holds no Deep Learning AMI parameters), so
the launch test puts a stand-in moto AMI there, and the bootstrap test checks the parameter
name follows AWS's documented pattern for that AMI.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

boto3 = pytest.importorskip("boto3")
moto = pytest.importorskip("moto")

REPO = Path(__file__).resolve().parents[3]
GPU_YAML = REPO / "cluster" / "gpu.yaml"
DLAMI_PARAMETER = re.compile(
    r"^resolve:ssm:/aws/service/deeplearning/ami/x86_64/"
    r"base-oss-nvidia-driver-gpu-ubuntu-(22|24)\.04/latest/ami-id$"
)


@pytest.fixture
def aws(monkeypatch, tmp_path):
    """moto's AWS, fake credentials, and a HOME of its own (Ray writes the SSH key there)."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
        "HOME": str(tmp_path),
        "MOTO_IAM_LOAD_MANAGED_POLICIES": "true",  # AWS's managed policies (AmazonEC2FullAccess)
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with moto.mock_aws():
        yield


def policy(name: str) -> str:
    """A policy file of cluster/iam/, with docs/cluster.md's placeholders filled in."""
    text = (REPO / "cluster" / "iam" / name).read_text()
    return text.replace("BUCKET", "raylab-results").replace("ACCOUNT_ID", "123456789012")


def make_instance_profiles(config: dict) -> None:
    """docs/cluster.md's one-time IAM setup, with the policies in cluster/iam/, for the YAML's names."""
    iam = boto3.client("iam")
    names = {t["node_config"]["IamInstanceProfile"]["Name"] for t in config["available_node_types"].values()}
    assert names == {"raylab-head", "raylab-worker"}
    for name in sorted(names):
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=policy("trust.json"))
        iam.put_role_policy(RoleName=name, PolicyName="results-bucket", PolicyDocument=policy("results-bucket.json"))
        iam.create_instance_profile(InstanceProfileName=name)
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    iam.attach_role_policy(RoleName="raylab-head", PolicyArn="arn:aws:iam::aws:policy/AmazonEC2FullAccess")
    iam.put_role_policy(
        RoleName="raylab-head", PolicyName="launch-workers", PolicyDocument=policy("head-launches-workers.json")
    )


def bootstrap(config: dict) -> dict:
    from ray.autoscaler._private.aws.config import bootstrap_aws
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return bootstrap_aws(prepared)


def test_gpu_yaml_bootstraps_security_groups_profiles_and_images(aws):
    config = yaml.safe_load(GPU_YAML.read_text())
    make_instance_profiles(config)
    booted = bootstrap(config)

    # Security group: created once, its rules accepted by EC2 (authorize_ingress did not fail),
    # SSH exactly once (Ray's own rule; the YAML adds no duplicate).
    ec2 = boto3.client("ec2")
    group_ids = {gid for t in booted["available_node_types"].values() for gid in t["node_config"]["SecurityGroupIds"]}
    assert len(group_ids) == 1
    (group,) = ec2.describe_security_groups(GroupIds=sorted(group_ids))["SecurityGroups"]
    ssh = [p for p in group["IpPermissions"] if p.get("FromPort") == 22]
    assert len(ssh) == 1 and ssh[0]["IpRanges"] == [{"CidrIp": "0.0.0.0/0"}]
    assert any(p["IpProtocol"] == "-1" and p["UserIdGroupPairs"] for p in group["IpPermissions"])

    # Every node type has an instance profile that exists; Ray made no default one for the head.
    iam = boto3.client("iam")
    profiles = {p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]}
    assert profiles == {"raylab-head", "raylab-worker"}
    for name, node_type in booted["available_node_types"].items():
        profile = node_type["node_config"]["IamInstanceProfile"]["Name"]
        assert profile == ("raylab-head" if name == booted["head_node_type"] else "raylab-worker")
        assert iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]

    # Images: the YAML's, not Ray's Ubuntu 18.04 fallback, on every node type.
    images = {t["node_config"]["ImageId"] for t in booted["available_node_types"].values()}
    assert len(images) == 1
    (image,) = images
    assert DLAMI_PARAMETER.match(image), image


def test_every_node_type_launches_through_rays_node_provider(aws):
    """One node of each type through Ray's AWS node provider, as the autoscaler launches them."""
    from ray.autoscaler._private.aws.node_provider import AWSNodeProvider
    from ray.autoscaler.tags import TAG_RAY_NODE_KIND, TAG_RAY_USER_NODE_TYPE

    config = yaml.safe_load(GPU_YAML.read_text())
    make_instance_profiles(config)
    booted = bootstrap(config)
    ec2 = boto3.client("ec2")
    stand_in = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ssm = boto3.client("ssm")
    provider = AWSNodeProvider(booted["provider"], booted["cluster_name"])
    for name, node_type in booted["available_node_types"].items():
        node_config = copy.deepcopy(node_type["node_config"])
        parameter = node_config["ImageId"].removeprefix("resolve:ssm:")
        try:  # moto holds some of AWS's public /aws/service parameters, and refuses writes there
            node_config["ImageId"] = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
        except ssm.exceptions.ParameterNotFound:
            node_config["ImageId"] = stand_in
        provider.create_node(node_config, {TAG_RAY_NODE_KIND: "worker", TAG_RAY_USER_NODE_TYPE: name}, 1)
    reservations = ec2.describe_instances()["Reservations"]
    launched = {i["InstanceType"]: i for r in reservations for i in r["Instances"]}
    assert set(launched) == {t["node_config"]["InstanceType"] for t in booted["available_node_types"].values()}
    for instance in launched.values():
        assert instance["IamInstanceProfile"]["Arn"].split("/")[-1] in {"raylab-head", "raylab-worker"}


def test_a_duplicated_ssh_rule_is_what_ec2_rejects(aws):
    """The check above is not vacuous: the old YAML's own SSH rule makes the bootstrap fail."""
    config = yaml.safe_load(GPU_YAML.read_text())
    make_instance_profiles(config)
    config["provider"]["security_group"] = {
        "GroupName": "raylab-ssh-only",
        "IpPermissions": [{"FromPort": 22, "ToPort": 22, "IpProtocol": "tcp", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    }
    with pytest.raises(Exception, match="(?i)duplicate"):
        bootstrap(config)
