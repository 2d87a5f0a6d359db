"""What a sweep will launch on an autoscaling cluster, and what it costs, before launch.

``python -m raylab.tune NAME --dry-run --cluster cluster/gpu.yaml`` reads the cluster file's
node types (their declared ``resources``) and prints the node type the trials go to, how many
trials run at once at the cluster's cap, its price per hour, and the sweep's trial-hours,
GPU-hours, wall time, dollars and checkpoint footprint. The node type is chosen the way Ray's
autoscaler scores node types for a queue of identical trials (``choose``; the test suite runs
Ray's own scheduler on ``cluster/gpu.yaml`` and checks the two agree for every shipped
experiment). Ray Train trials (several
workers) each hold one ``trial_driver`` of the head (``raylab.launch.trainable``): where the
head declares that resource, at most that many run at once, and the autoscaler only sees the
worker demand of the trials whose driver runs, so it launches nodes for that many.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from raylab import search_space, workloads
from raylab.config import from_dict
from raylab.errors import UserError
from raylab.launch.trainable import DRIVER_RESOURCE

# On-demand list prices in USD per hour, AWS us-west-2 (Linux), as of 2026; other regions differ
# by up to about 20%. An instance type not listed prints its cost as unknown.
PRICE_PER_HOUR = {
    "m5.2xlarge": 0.384,
    "m5.4xlarge": 0.768,
    "g5.xlarge": 1.006,
    "g5.2xlarge": 1.212,
    "g5.4xlarge": 1.624,
    "g5.12xlarge": 5.672,
    "p4d.24xlarge": 32.7726,
}


@dataclass(frozen=True)
class NodeType:
    """One of a cluster file's ``available_node_types``."""

    name: str
    """The node type's key in the cluster file."""
    cpus: float
    """Its declared ``resources.CPU``."""
    gpus: float
    """Its declared ``resources.GPU`` (0 without)."""
    max_workers: int
    """The most nodes of this type at once (the type's cap and the cluster's)."""
    instance: str
    """Its ``node_config.InstanceType`` (or ``machineType``), for the price."""
    trial_drivers: float = 0.0
    """Its declared ``resources.trial_driver`` (the head's: Ray Train trials at once; 0: none)."""
    memory: float = 0.0
    """Its declared ``resources.memory`` in bytes: what Ray's AWS provider fills in when it is
    left out (70% of the instance's memory; the rest is the object store's); 0: not declared."""

    @property
    def price(self) -> float | None:
        """USD per hour, when the instance type's price is known."""
        return PRICE_PER_HOUR.get(self.instance)


def load(path: str | Path) -> tuple[NodeType | None, list[NodeType], int]:
    """The head node type, the worker node types and the cluster's ``max_workers``."""
    import yaml

    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"--cluster {path}: cannot read it: {err}") from None
    if not isinstance(config, dict) or "available_node_types" not in config:
        raise UserError(
            f"--cluster {path}: no available_node_types (a cluster file of an "
            "autoscaling provider, such as cluster/gpu.yaml)"
        )
    cap = int(config.get("max_workers", 0))
    head, workers = None, []
    for name, spec in config["available_node_types"].items():
        resources = spec.get("resources") or {}
        node_config = spec.get("node_config") or {}
        if name != config.get("head_node_type") and "CPU" not in resources:
            raise UserError(
                f"--cluster {path}: available_node_types.{name}.resources: declare CPU "
                "(and GPU) so the node type's capacity is known before launch"
            )
        node = NodeType(
            name,
            float(resources.get("CPU", 0)),
            float(resources.get("GPU", 0)),
            min(int(spec.get("max_workers", cap)), cap),
            str(node_config.get("InstanceType", node_config.get("machineType", ""))),
            float(resources.get(DRIVER_RESOURCE, 0)),
            float(resources.get("memory", 0)),
        )
        if name == config.get("head_node_type"):
            head = node
        else:
            workers.append(node)
    return head, workers, cap


def trials_per_node(node: NodeType, cpus: float, gpus: float) -> int:
    """How many trials asking ``cpus`` CPUs and ``gpus`` GPUs fit one node:
    ``min(floor(C_node / c), floor(G_node / g))`` over the resources the trial asks for."""
    fits = [math.floor(node.cpus / cpus + 1e-9)] if cpus > 0 else []
    if gpus > 0:
        fits.append(math.floor(node.gpus / gpus + 1e-9))
    return min(fits) if fits else 0


def choose(nodes: list[NodeType], cpus: float, gpus: float) -> NodeType | None:
    """The node type the autoscaler launches for a queue of trials of ``cpus`` CPUs, ``gpus`` GPUs.

    Ray 2.60's default utilization scorer (``autoscaler/_private/resource_demand_scheduler.py``)
    on each type packed with the ``n >= 1`` trials that fit it::

        score = (not (a GPU type and CPU-only trials), resource types asked for that the type has,
                 min_r C_r u_r^3, mean_r C_r u_r^3)

    over the type's resources ``r`` of capacity ``C_r >= 1``, ``u_r`` the share the trials use.
    Each cloud node also has ``memory`` (declared, or filled in by the provider; trials ask
    Ray for none, ``memory_refusal`` checks it after the choice), so the minimum is 0 and the capacity-weighted mean decides: a type whose large resource is full
    beats a small one whose every resource is (four quarter-GPU trials of 4 CPUs fill a 16-CPU
    GPU node, which beats one 4-CPU GPU node). Highest score wins, then the lower price per trial.
    """
    best, best_key = None, None
    for node in nodes:
        n = trials_per_node(node, cpus, gpus)
        if n < 1:
            continue
        capacity = {"CPU": node.cpus, "GPU": node.gpus, "memory": node.memory or math.inf}
        used = {"CPU": n * cpus, "GPU": n * gpus, "memory": 0.0}
        weighted = [0.0 if c == math.inf else c * (used[r] / c) ** 3 for r, c in capacity.items() if c >= 1]
        matching = (cpus > 0 and node.cpus >= 1) + (gpus > 0 and node.gpus >= 1)
        price = node.price if node.price is not None else math.inf
        key = (gpus > 0 or node.gpus == 0, matching, min(weighted), sum(weighted) / len(weighted), -price / n)
        if best_key is None or key > best_key:
            best, best_key = node, key
    return best


def trial_memory(experiment, limit: int = 256) -> float:
    """Bytes of host memory one trial needs: the file's ``estimate.memory_bytes`` when stated,
    else the largest figure of the workload's ``memory`` function over the grid's trials (the
    first ``limit`` combinations, as the preflight checks them); 0 when neither says."""
    if experiment.estimate.memory_bytes:
        return experiment.estimate.memory_bytes
    workload = workloads.get(experiment.workload)
    if not workload.memory:
        return 0.0
    need = workloads.resolve(workload.memory)
    cls = workload.config_class()
    listed = {
        key: args
        for key, spec in experiment.search.items()
        for kind, args in spec.items()
        if kind in ("grid", "choice")
    }
    seen, most = set(), 0.0
    for combo in itertools.islice(itertools.product(*listed.values()), limit):
        values = search_space.with_variant({**experiment.config, **dict(zip(listed, combo))})
        cfg = from_dict(cls, values, experiment.source, "config")
        if repr(cfg) in seen:
            continue
        seen.add(repr(cfg))
        most = max(most, float(need(cfg)))
    return most


def memory_refusal(
    experiment, name: str, nodes: list[NodeType], node: NodeType | None, per_node: int, need: float
) -> str:
    """Why the plan cannot run, by memory: one trial larger than every node type's declared
    memory, or the trials Ray packs on one node (by CPU and GPU; trials ask Ray for no memory)
    larger than that node's; "" when it fits or nothing declares memory. ``need``: a trial's
    bytes (``trial_memory``)."""
    if not need:
        return ""
    declared = [n for n in nodes if n.memory]
    if declared and all(n.memory < need for n in declared):
        largest = max(declared, key=lambda n: n.memory)
        return (
            f"--cluster {name}: one trial of {experiment.name} needs {_gb(need)} of memory "
            f"({_need_basis(experiment)}) but the largest node type, {largest.name} ({largest.instance}), "
            f"has {_gb(largest.memory)} (its resources.memory); lower the trial's memory or add a larger node type"
        )
    if node is not None and node.memory and need > node.memory:
        return (
            f"--cluster {name}: one trial of {experiment.name} needs {_gb(need)} of memory "
            f"({_need_basis(experiment)}) but Ray's autoscaler launches {node.name} ({node.instance}) "
            f"for it by CPU and GPU, which has {_gb(node.memory)} (its resources.memory); ask for the "
            "CPUs or GPUs of a node type with more memory, or lower the trial's memory"
        )
    if node is not None and node.memory and per_node * need > node.memory:
        fit = int(node.memory // need)
        return (
            f"--cluster {name}: {experiment.name} puts {per_node} trials on each {node.name} "
            f"({node.instance}) by CPU and GPU, {per_node} x {_gb(need)} = {_gb(per_node * need)} of memory "
            f"({_need_basis(experiment)}), but the node has {_gb(node.memory)} (its resources.memory); "
            f"ask each trial for more CPU or GPU so that at most {fit} share a node, or lower the trial's memory"
        )
    return ""


def rate_text(estimate) -> str:
    """Whether a dollar figure's rate was measured, and where, or is a target."""
    if estimate.rate_measured:
        return f"rate measured: {estimate.rate_measured}"
    return f"rate not measured: {estimate.rate_basis or 'a target stated in the file'}"


def _need_basis(experiment) -> str:
    if experiment.estimate.memory_bytes:
        return "the file's estimate.memory_bytes"
    return f"workload {experiment.workload}'s own figure for its config"


def _gb(count: float) -> str:
    return f"{count / 1e9:,.1f} GB"


def _hours(hours: float) -> str:
    if hours < 1:
        return f"{hours * 60:,.0f} min"
    return f"{hours:,.1f} h" if hours < 48 else f"{hours / 24:,.1f} days"


def _amount(value: float) -> str:
    """A figure to two significant digits below 10, else to the unit (``0.18``, ``1,764``)."""
    return f"{value:,.2g}" if value < 10 else f"{value:,.0f}"


def plan_text(experiment, cluster: str | Path) -> str:
    """The ``--dry-run --cluster`` lines for one experiment."""
    head, nodes, cap = load(cluster)
    resources = experiment.resources
    total = resources.total()
    trials = search_space.grid_size(experiment.search) * experiment.num_samples
    name = Path(cluster).name
    if resources.workers > 1:
        # A multi-worker trial's placement group spans its workers' bundles: per node, the
        # whole trial when one node holds it.
        cpus, gpus = total["CPU"], total["GPU"]
    else:
        cpus, gpus = resources.cpus_per_worker, resources.gpus_per_worker
    node = choose(nodes, cpus, gpus)
    if node is None:
        return (
            f"# cluster {name}: no node type holds one trial ({cpus:g} CPU, {gpus:g} GPU); "
            "its trials would wait forever"
        )
    per_node = trials_per_node(node, cpus, gpus)
    memory = trial_memory(experiment)
    if refusal := memory_refusal(experiment, name, nodes, node, per_node, memory):
        raise UserError(refusal)
    drivers = int(head.trial_drivers) if head and resources.uses_ray_train else 0
    running = min(trials, drivers) if drivers else trials  # trials whose workers ask for nodes
    nodes_at_cap = min(node.max_workers, math.ceil(running / per_node))
    at_once = min(running, nodes_at_cap * per_node)
    head_price = head.price if head and head.price is not None else 0.0
    per_hour = nodes_at_cap * node.price + head_price if node.price is not None else None
    lines = [
        f"# cluster {name}: {node.name} ({node.instance}, {node.cpus:g} CPU, {node.gpus:g} GPU): "
        f"{per_node} trial(s) per node; at the cap {nodes_at_cap} x {node.name} "
        f"(of max_workers {node.max_workers}), {at_once} of {trials} trials at once"
        + (
            f" (the head's {DRIVER_RESOURCE}: {drivers} Ray Train trials at a time)"
            if drivers and running < min(trials, node.max_workers * per_node)
            else ""
        ),
        "#   price at the cap: "
        + (
            f"${per_hour:,.2f}/h ({nodes_at_cap} x ${node.price:.3f} + head "
            f"{head.instance if head else '-'} ${head_price:.3f})"
            if per_hour is not None
            else f"unknown (no price for {node.instance})"
        ),
    ]
    if memory and node.memory:
        lines.append(
            f"#   memory per node: {per_node} x {_gb(memory)} ({_need_basis(experiment)}) of its {_gb(node.memory)}"
        )
    estimate = experiment.estimate
    length = experiment.trial_length()
    if length and estimate.steps_per_s:
        steps = length[1]
        trial_hours = steps / estimate.steps_per_s / 3600
        waves = math.ceil(trials / at_once)
        wall = waves * trial_hours
        line = (
            f"#   {trials} trials x {_hours(trial_hours)} = {trials * trial_hours:,.1f} trial-hours, "
            f"{trials * trial_hours * total['GPU']:,.1f} GPU-hours; wall time at the cap "
            f"{waves} wave(s) x {_hours(trial_hours)} = {_hours(wall)}"
        )
        if per_hour is not None:
            # Nodes go when idle: the last wave pays only for the nodes it still uses.
            last = trials - (waves - 1) * at_once
            node_hours = ((waves - 1) * nodes_at_cap + math.ceil(last / per_node)) * trial_hours
            dollars = node_hours * node.price + wall * head_price
            line += f"; about ${_amount(dollars)} ({rate_text(estimate)})"
        lines.append(line)
    else:
        lines.append(
            "#   trial-hours, GPU-hours, wall time, dollars: unknown (the file states no "
            "estimate.steps_per_s with a stop criterion or estimate.trial_steps)"
        )
    if estimate.checkpoint_bytes:
        keep = experiment.checkpoint.keep or 1
        stored = trials * keep * estimate.checkpoint_bytes
        lines.append(
            f"#   checkpoints in storage: {trials} x {keep} x "
            f"{_amount(estimate.checkpoint_bytes / 1e9)} GB = {_amount(stored / 1e9)} GB "
            f"(S3 standard, us-west-2: about ${_amount(stored / 1e9 * 0.023)} per month)"
        )
    else:
        lines.append("#   checkpoints in storage: unknown (the file states no estimate.checkpoint_bytes)")
    return "\n".join(lines)
