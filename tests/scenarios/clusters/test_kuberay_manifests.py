"""cluster/kuberay/: the RayCluster and RayJob validated against KubeRay's CRD schemas (v1.7.0).

The schemas are the ``openAPIV3Schema`` of the operator's CRDs at the pinned release, kept as
test data in kuberay/v1.7.0/ (kuberay_schema.py made them; SOURCE names the commit). They are
checked the way ``kubectl apply --validate=strict`` checks a custom resource: the schema's
types, enums, patterns and required fields, and no field the schema does not declare (the API
server would drop it silently; strict validation refuses it). The operator's own checks beyond
the schema that these manifests touch (validation.go at the same release) are tested too. No
Kubernetes runs here (docs/kubernetes.md).
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
KUBERAY = REPO / "cluster" / "kuberay"
SCHEMAS = Path(__file__).with_name("kuberay") / "v1.7.0"
PLURAL = {"RayCluster": "rayclusters", "RayJob": "rayjobs"}


def strict(schema: dict) -> dict:
    """The schema with unknown fields refused: every object that declares its properties and
    does not keep unknown fields (x-kubernetes-preserve-unknown-fields) gets
    additionalProperties: false, as strict field validation treats it."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def validator(kind: str) -> jsonschema.Draft7Validator:
    with gzip.open(SCHEMAS / f"{PLURAL[kind]}.schema.json.gz") as f:
        return jsonschema.Draft7Validator(strict(json.load(f)))


def errors(manifest: dict) -> list[str]:
    found = validator(manifest["kind"]).iter_errors(manifest)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found)


def load(name: str) -> dict:
    return yaml.safe_load((KUBERAY / name).read_text())


def containers(manifest: dict):
    spec = manifest["spec"]
    if manifest["kind"] == "RayCluster":
        groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
        for group in groups:
            yield group["template"]["spec"], group["template"]["spec"]["containers"]
    else:
        pod = spec["submitterPodTemplate"]["spec"]
        yield pod, pod["containers"]


@pytest.mark.parametrize("name", ["raycluster.yaml", "rayjob.yaml"])
def test_manifest_validates_against_kuberay_crd_schema(name):
    manifest = load(name)
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] in PLURAL
    assert errors(manifest) == []


def test_validation_is_not_vacuous():
    """Controls: a misspelled field, a number where the schema wants a string (group resources
    are a string map) and a string where it wants an integer are each refused."""
    cluster = load("raycluster.yaml")
    typo = copy.deepcopy(cluster)
    typo["spec"]["workerGroupSpec"] = typo["spec"].pop("workerGroupSpecs")
    assert any("workerGroupSpec" in e for e in errors(typo))
    number = copy.deepcopy(cluster)
    number["spec"]["workerGroupSpecs"][0]["resources"]["GPU"] = 1
    assert any("resources/GPU" in e for e in errors(number))
    text = copy.deepcopy(cluster)
    text["spec"]["workerGroupSpecs"][0]["maxReplicas"] = "12"
    assert any("maxReplicas" in e for e in errors(text))
    job = load("rayjob.yaml")
    del job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    assert any("containers" in e for e in errors(job))


def kubernetes_bytes(quantity: str) -> float:
    """A Kubernetes memory quantity (``12Gi``, ``500M``, ``1024``) in bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    for suffix in sorted(units, key=len, reverse=True):
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * units[suffix]
    return float(quantity)


def test_raycluster_groups_are_gpu_yaml_node_types():
    """Head and every worker group carry the Ray resources of gpu.yaml's node type of the same
    name (what trials pack by), on its instance type, with its worker cap; a GPU group's pods
    ask Kubernetes for as many GPUs as Ray is told they have."""
    gpu = yaml.safe_load((REPO / "cluster" / "gpu.yaml").read_text())
    types = gpu["available_node_types"]
    spec = load("raycluster.yaml")["spec"]
    groups = {gpu["head_node_type"]: spec["headGroupSpec"]}
    groups.update({g["groupName"].replace("-", "_"): g for g in spec["workerGroupSpecs"]})
    assert set(groups) == set(types)
    for name, group in groups.items():
        node_type = types[name]
        ray_resources = {k: float(v) for k, v in group["resources"].items()}
        assert ray_resources == {k: float(v) for k, v in node_type["resources"].items()}, name
        pod = group["template"]["spec"]
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == node_type["node_config"]["InstanceType"]
        (container,) = pod["containers"]
        k8s_gpus = container["resources"].get("limits", {}).get("nvidia.com/gpu", 0)
        assert k8s_gpus == node_type["resources"].get("GPU", 0), name
        if "memory" in ray_resources:  # Ray's memory fits in what Kubernetes gives the pod
            assert ray_resources["memory"] <= kubernetes_bytes(container["resources"]["limits"]["memory"]), name
        if name != gpu["head_node_type"]:
            assert (group["minReplicas"], group["maxReplicas"]) == (node_type["min_workers"], node_type["max_workers"])
    assert spec["autoscalerOptions"]["idleTimeoutSeconds"] == 60 * gpu["idle_timeout_minutes"]
    assert spec["rayVersion"] == "2.60.0"


def test_every_pod_runs_one_image_and_reads_s3_credentials_from_the_secret():
    """One image for every pod (cluster/Dockerfile's), the Secret mounted in every Ray pod with
    AWS_SHARED_CREDENTIALS_FILE under the mount, and no key in any environment variable."""
    cluster, job = load("raycluster.yaml"), load("rayjob.yaml")
    images = {c["image"] for m in (cluster, job) for _, cs in containers(m) for c in cs}
    assert len(images) == 1, images
    for pod, (container,) in containers(cluster):
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert secrets == {"s3-credentials": "raylab-s3"} and "s3-credentials" in mounts
        assert env["AWS_SHARED_CREDENTIALS_FILE"].startswith(mounts["s3-credentials"] + "/")
        assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} & set(env)
    assert "AWS_" not in json.dumps(job["spec"])  # nothing of the credentials in the job itself


def test_rayjob_runs_a_raylab_sweep_on_the_raycluster_with_s3_storage():
    """The entrypoint is ``python -m raylab.tune NAME ...`` for a shipped experiment with
    s3:// storage; the job selects the RayCluster by name, and keeps to what KubeRay's
    controller allows for that mode (no backoffLimit above 0, no suspend, not SidecarMode)."""
    job, cluster = load("rayjob.yaml"), load("raycluster.yaml")
    spec = job["spec"]
    assert spec["clusterSelector"] == {"ray.io/cluster": cluster["metadata"]["name"]}
    assert spec.get("backoffLimit", 0) <= 0 and not spec.get("suspend") and spec.get("submissionMode") != "SidecarMode"
    argv = shlex.split(spec["entrypoint"])
    assert argv[:3] == ["python", "-m", "raylab.tune"]
    assert (REPO / "tune_configs" / f"{argv[3]}.yaml").is_file(), argv[3]
    assert argv[argv.index("--storage") + 1].startswith("s3://")


def test_rayjob_entrypoint_is_accepted_by_raylab(s3_server, tmp_path):
    """The entrypoint's own arguments, with the bucket swapped for a local S3 server's, pass
    raylab's dry-run: the experiment resolves, the storage opens, the preflight passes."""
    uri, _ = s3_server
    argv = shlex.split(load("rayjob.yaml")["spec"]["entrypoint"])
    storage = argv.index("--storage") + 1
    bucket_root = argv[storage]
    argv[storage] = uri
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        # on the cluster Ray's RAY_ADDRESS makes raylab join it; here --cluster plans it on gpu.yaml's
        # node types (which the RayCluster's groups are), so this machine's own CPUs and GPUs do not count
        [sys.executable, *argv[1:], "--dry-run", "--cluster", str(REPO / "cluster" / "gpu.yaml")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    storage_lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("# storage:")]
    assert storage_lines == ["# storage: ok"], (bucket_root, storage_lines)
