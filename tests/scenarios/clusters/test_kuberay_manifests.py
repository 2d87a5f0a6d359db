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
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from scenarios.clusters.dockerfile_steps import context_files, steps

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


def platform() -> dict[str, dict]:
    """platform.yaml's objects by kind."""
    docs = yaml.safe_load_all((KUBERAY / "platform.yaml").read_text())
    return {doc["kind"]: doc for doc in docs if doc}


def test_every_pod_runs_one_image_as_the_service_account_with_no_credentials_file():
    """One image for every pod (cluster/Dockerfile's); every pod, the submitter's too, runs as
    platform.yaml's service account (IRSA / Pod Identity), and no pod mounts a Secret or holds a
    key in an environment variable."""
    cluster, job = load("raycluster.yaml"), load("rayjob.yaml")
    images = {c["image"] for m in (cluster, job) for _, cs in containers(m) for c in cs}
    assert len(images) == 1, images
    account = platform()["ServiceAccount"]
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    for manifest in (cluster, job):
        for pod, pod_containers in containers(manifest):
            assert pod["serviceAccountName"] == account["metadata"]["name"]
            assert not [v for v in pod.get("volumes", []) if "secret" in v]
            for container in pod_containers:
                env = {e["name"] for e in container.get("env", [])}
                assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} & env
                assert "AWS_SHARED_CREDENTIALS_FILE" not in env
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


def image_file_set(root: Path) -> Path:
    """cluster/Dockerfile's WORKDIR under ``root`` with what its COPY lines put there: the
    build context, the tree less Dockerfile.dockerignore (no data/, no results/)."""
    dockerfile = REPO / "cluster" / "Dockerfile"
    workdir = next(arg for word, arg in steps(dockerfile) if word == "WORKDIR")
    home = root / workdir.lstrip("/")
    for rel in context_files(REPO, dockerfile):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, home / rel)
    return home


def in_bucket(token: str, storage_uri: str) -> str:
    """``s3://YOUR-BUCKET/PATH`` in ``token`` moved to the local S3 server's bucket (its
    endpoint in the URI's query)."""
    bucket, _, query = storage_uri.partition("?")
    bucket = bucket.split("://", 1)[1].split("/", 1)[0]
    return re.sub(r"s3://YOUR-BUCKET/(\S*)", lambda m: f"s3://{bucket}/{m.group(1)}?{query}", token)


def run_entrypoint(job: dict, s3_uri: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """The RayJob's data staging (its annotation raylab.io/stage-first, with a small archive in
    the real format served from a file: URL) and then its entrypoint with --dry-run --cluster,
    both with the bucket swapped for the local S3 server's, in the image's file set: its WORKDIR
    holding the build context, raylab imported from there (as the image installs it)."""
    from raylab.data.cifar import write_synthetic_cifar

    home = image_file_set(tmp_path / "image")
    env = {**os.environ, "PYTHONPATH": str(home), "HOME": str(tmp_path / "home"), "RAY_ADDRESS": ""}
    stage = job["metadata"].get("annotations", {}).get("raylab.io/stage-first")
    if stage:
        archive = write_synthetic_cifar(tmp_path / "archive", "cifar10", n_train=100, n_test=50)
        md5 = (archive.parent / (archive.name + ".md5")).read_text().split()[0]
        argv = [in_bucket(a, s3_uri) for a in shlex.split(stage)]
        assert argv[:3] == ["python", "-m", "raylab.data.stage"], stage
        proc = subprocess.run(
            [sys.executable, *argv[1:], "--url", archive.as_uri(), "--md5", md5],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    argv = [in_bucket(a, s3_uri) for a in shlex.split(job["spec"]["entrypoint"])]
    return subprocess.run(
        # on the cluster Ray's RAY_ADDRESS makes raylab join it; here --cluster plans it on gpu.yaml's
        # node types (which the RayCluster's groups are) and runs the preflight as the head would
        [sys.executable, *argv[1:], "--dry-run", "--cluster", str(home / "cluster" / "gpu.yaml")],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_rayjob_entrypoint_starts_in_the_image_file_set(s3_server, tmp_path):
    """The shipped RayJob, run as its head pod would: its data staged as the manifest says, then
    its entrypoint's own arguments pass raylab's dry run there with a clean preflight (the
    experiment resolves, the storage opens, the data is found) and exit 0."""
    uri, _ = s3_server
    proc = run_entrypoint(load("rayjob.yaml"), uri, tmp_path)
    checks = [ln for ln in proc.stdout.splitlines() if ln.startswith(("# storage:", "# workload preflight"))]
    assert checks == ["# storage: ok", "# workload preflight: ok"], (checks, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_rayjob_whose_data_is_not_in_the_image_is_refused(s3_server, tmp_path):
    """Control: the entrypoint as it was (fair_adv's data_dir data/cifar, which the image leaves
    out, and no staging) exits 2 with the preflight's refusal naming the missing dataset."""
    uri, _ = s3_server
    job = load("rayjob.yaml")
    job["metadata"]["annotations"].pop("raylab.io/stage-first")
    job["spec"]["entrypoint"] = re.sub(r" config\.data_dir=\S+", "", job["spec"]["entrypoint"])
    proc = run_entrypoint(job, uri, tmp_path)
    assert proc.returncode == 2 and "cifar10 not found" in proc.stderr, proc.stderr[-2000:]
    assert "on the cluster's head" in proc.stderr


# --- scheduling: Kubernetes' node affinity rules, on nodes labelled as each provider labels them ---


def _matches(expression: dict, labels: dict) -> bool:
    """One matchExpressions entry (k8s.io/apimachinery labels.Selector semantics: NotIn and
    DoesNotExist hold for a node without the key)."""
    key, op, values = expression["key"], expression["operator"], expression.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        return key in labels and (
            int(labels[key]) > int(values[0]) if op == "Gt" else int(labels[key]) < int(values[0])
        )
    raise ValueError(op)


def schedulable(pod: dict, node: dict) -> bool:
    """Whether the scheduler may place ``pod`` on ``node`` ({labels, taints}): nodeSelector,
    required node affinity (terms ORed, expressions ANDed) and NoSchedule taints tolerated."""
    labels = node["labels"]
    if any(labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required and not any(
        all(_matches(e, labels) for e in term.get("matchExpressions", [])) for term in required["nodeSelectorTerms"]
    ):
        return False
    for taint in node.get("taints", []):
        tolerated = any(
            t.get("key") == taint["key"]
            and t.get("effect", taint["effect"]) == taint["effect"]
            and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
            for t in pod.get("tolerations", [])
        )
        if not tolerated:
            return False
    return True


def nodes_of(instance: str, gpu: bool) -> dict[str, dict]:
    """Nodes of ``instance`` as Karpenter, EKS managed node groups, GKE and AKS label them, spot
    and on-demand, and one with no capacity label at all (a plain node group)."""
    base = {"node.kubernetes.io/instance-type": instance}
    gpu_taint = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}] if gpu else []
    return {
        "karpenter spot": {"labels": {**base, "karpenter.sh/capacity-type": "spot"}, "taints": gpu_taint},
        "karpenter on-demand": {"labels": {**base, "karpenter.sh/capacity-type": "on-demand"}, "taints": gpu_taint},
        "eks SPOT": {"labels": {**base, "eks.amazonaws.com/capacityType": "SPOT"}, "taints": gpu_taint},
        "eks ON_DEMAND": {"labels": {**base, "eks.amazonaws.com/capacityType": "ON_DEMAND"}, "taints": gpu_taint},
        "gke spot": {
            "labels": {**base, "cloud.google.com/gke-spot": "true"},
            "taints": gpu_taint + [{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}],
        },
        "gke standard": {"labels": {**base, "cloud.google.com/gke-nodepool": "gpu"}, "taints": gpu_taint},
        "aks spot": {
            "labels": {**base, "kubernetes.azure.com/scalesetpriority": "spot"},
            "taints": gpu_taint
            + [{"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}],
        },
        "unlabelled": {"labels": dict(base), "taints": gpu_taint},
    }


SPOT_NODES = {"karpenter spot", "eks SPOT", "gke spot", "aks spot"}


def groups() -> dict[str, dict]:
    spec = load("raycluster.yaml")["spec"]
    return {"head": spec["headGroupSpec"], **{g["groupName"]: g for g in spec["workerGroupSpecs"]}}


def test_head_and_on_demand_groups_cannot_land_on_spot_and_spot_groups_only_on_spot():
    for name, group in groups().items():
        pod = group["template"]["spec"]
        instance = pod["nodeSelector"]["node.kubernetes.io/instance-type"]
        placed = {n for n, node in nodes_of(instance, "GPU" in group["resources"]).items() if schedulable(pod, node)}
        if "spot" in group["resources"]:
            assert placed == SPOT_NODES, (name, placed)
        else:
            assert placed == set(nodes_of(instance, False)) - SPOT_NODES, (name, placed)
    submitter = load("rayjob.yaml")["spec"]["submitterPodTemplate"]["spec"]
    assert not {n for n, node in nodes_of("m5.large", False).items() if schedulable(submitter, node)} & SPOT_NODES


def test_the_scheduling_predicate_is_not_vacuous():
    """Control: the head as it was (an instance type alone) lands on Karpenter's and EKS's spot
    nodes; the predicate refuses a wrong instance type and an untolerated taint."""
    head = copy.deepcopy(groups()["head"]["template"]["spec"])
    del head["affinity"]
    nodes = nodes_of("m5.2xlarge", False)
    assert schedulable(head, nodes["karpenter spot"]) and schedulable(head, nodes["eks SPOT"])
    assert not schedulable(head, nodes_of("m5.4xlarge", False)["unlabelled"])
    assert not schedulable(head, nodes_of("m5.2xlarge", True)["unlabelled"])  # the GPU taint


def test_every_ray_pod_mounts_a_memory_backed_dev_shm_within_its_memory_limit():
    for name, group in groups().items():
        pod = group["template"]["spec"]
        (container,) = pod["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["emptyDir"]["medium"] == "Memory", name
        size = kubernetes_bytes(volume["emptyDir"]["sizeLimit"])
        limit = kubernetes_bytes(container["resources"]["limits"]["memory"])
        assert 0.25 * limit <= size <= 0.35 * limit, (name, size / limit)  # Ray's object store share


def test_gpu_pods_have_a_startup_probe_that_runs_the_node_gpu_check(tmp_path):
    """Each GPU group's container has a startup probe; its command, run here (no GPU, CPU torch),
    fails naming this host: a pod with no usable GPU never becomes Ready."""
    import socket

    commands = set()
    for name, group in groups().items():
        (container,) = group["template"]["spec"]["containers"]
        if "GPU" in group["resources"]:
            probe = container["startupProbe"]
            assert probe["failureThreshold"] * probe["periodSeconds"] >= 120, name
            commands.add(tuple(probe["exec"]["command"]))
        else:
            assert "startupProbe" not in container, name
    (command,) = commands
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, text=True, timeout=120)
    assert command[0] == "python" and proc.returncode == 1, proc.stderr[-1000:]
    assert proc.stderr.startswith(socket.gethostname() + ": ") and "torch sees no CUDA device" in proc.stderr


def gpu_cap(gpu_yaml: dict) -> int:
    """The most GPUs gpu.yaml's autoscaler can hold at once: ``max_workers`` nodes, filled with
    the GPU types of most GPUs per node first, each up to its own ``max_workers``."""
    left, total = gpu_yaml["max_workers"], 0
    types = [t for n, t in gpu_yaml["available_node_types"].items() if n != gpu_yaml["head_node_type"]]
    for node_type in sorted(types, key=lambda t: -t["resources"].get("GPU", 0)):
        take = min(left, node_type.get("max_workers", left))
        total, left = total + take * node_type["resources"].get("GPU", 0), left - take
    return int(total)


def test_resource_quota_caps_gpus_and_pods_at_gpu_yaml_figures():
    gpu = yaml.safe_load((REPO / "cluster" / "gpu.yaml").read_text())
    hard = platform()["ResourceQuota"]["spec"]["hard"]
    assert gpu_cap(gpu) == 12
    assert int(hard["requests.nvidia.com/gpu"]) == gpu_cap(gpu)
    assert int(hard["pods"]) == 1 + gpu["max_workers"] + 1  # the head, the workers, the submitter
    # without the quota the groups would allow more: it is the binding cap
    spec = load("raycluster.yaml")["spec"]
    group_gpus = sum(
        g["maxReplicas"] * g["template"]["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", 0)
        for g in spec["workerGroupSpecs"]
    )
    assert group_gpus == 48 > int(hard["requests.nvidia.com/gpu"])


def test_dashboard_needs_a_token_and_only_the_cluster_and_its_job_reach_the_head():
    cluster, job = load("raycluster.yaml"), load("rayjob.yaml")
    spec = cluster["spec"]
    assert spec["authOptions"] == {"mode": "token"}
    assert spec["autoscalerOptions"]["version"] == "v2"
    assert "networkPolicy" not in spec  # an alpha feature gate of the operator; platform.yaml's policy instead
    policy = platform()["NetworkPolicy"]["spec"]
    # the labels KubeRay puts on the head pod and on the RayJob's submitter pod
    head_labels = {"ray.io/cluster": cluster["metadata"]["name"], "ray.io/node-type": "head"}
    worker_labels = {"ray.io/cluster": cluster["metadata"]["name"], "ray.io/node-type": "worker"}
    submitter = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": job["metadata"]["name"]}
    stranger = {"app": "notebook"}

    def selects(selector, labels):
        return all(labels.get(k) == v for k, v in selector["matchLabels"].items())

    assert selects(policy["podSelector"], head_labels) and not selects(policy["podSelector"], worker_labels)
    assert policy["policyTypes"] == ["Ingress"]
    peers = [peer["podSelector"] for rule in policy["ingress"] for peer in rule["from"]]
    admitted = lambda labels: any(selects(p, labels) for p in peers)  # noqa: E731
    assert admitted(worker_labels) and admitted(submitter) and not admitted(stranger)


def test_rayjob_has_a_deadline_a_small_submitter_and_a_valid_cleanup():
    """activeDeadlineSeconds above the plan's wall time for fair_adv at the cap; a submitter of
    at most half a CPU and 1 GiB; and validation.go's rule that ttlSecondsAfterFinished > 0
    needs shutdownAfterJobFinishes (which a clusterSelector job cannot use)."""
    spec = load("rayjob.yaml")["spec"]
    assert spec["activeDeadlineSeconds"] > 0
    if spec.get("ttlSecondsAfterFinished", 0) > 0:
        assert spec.get("shutdownAfterJobFinishes")
    assert not (spec.get("clusterSelector") and spec.get("shutdownAfterJobFinishes"))
    (container,) = spec["submitterPodTemplate"]["spec"]["containers"]
    requests = container["resources"]["requests"]
    assert kubernetes_bytes(requests["memory"]) <= 2**30 and requests["cpu"].endswith("m")
    assert int(requests["cpu"][:-1]) <= 500


def test_the_service_accounts_role_trusts_only_that_account():
    """cluster/iam's trust policies for the pods' role: IRSA's names platform.yaml's service
    account as the only subject; Pod Identity's trusts EKS's pods service."""
    account = platform()["ServiceAccount"]["metadata"]["name"]
    irsa = json.loads((REPO / "cluster" / "iam" / "trust-irsa.json").read_text())
    (statement,) = irsa["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    subjects = [v for k, v in statement["Condition"]["StringEquals"].items() if k.endswith(":sub")]
    assert subjects == [f"system:serviceaccount:NAMESPACE:{account}"]
    pod_identity = json.loads((REPO / "cluster" / "iam" / "trust-pod-identity.json").read_text())
    (statement,) = pod_identity["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(statement["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    role = platform()["ServiceAccount"]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role.endswith(":role/raylab-k8s")
