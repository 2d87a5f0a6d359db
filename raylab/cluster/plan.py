"""What a sweep will launch on an autoscaling cluster, and what it costs, before launch.

``python -m raylab.tune NAME --dry-run --cluster cluster/gpu.yaml`` reads the cluster file's
node types (their declared ``resources``) and prints the node type the trials go to, how many
trials run at once at the cluster's cap, its price per hour, and the sweep's trial-hours,
GPU-hours, wall time, dollars and checkpoint footprint. The node type is chosen the way Ray's
autoscaler scores node types for a queue of identical trials (``choose``; the test suite runs
Ray's own scheduler on ``cluster/gpu.yaml`` and checks the two agree for every shipped
experiment). Ray Train trials (several
workers) each hold one ``trial_driver`` of the head (``raylab.cluster.DRIVER_RESOURCE``): where the
head declares that resource, at most that many run at once, and the autoscaler only sees the
worker demand of the trials whose driver runs, so it launches nodes for that many.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from raylab import search_space, workloads
from raylab.cluster import DRIVER_RESOURCE, prices
from raylab.cluster.prices import PRICE_PER_HOUR, trial_exposure_hours
from raylab.config import from_dict, with_variant
from raylab.errors import UserError
from raylab.experiment import SPOT_ASK, SPOT_RESOURCE


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
    spot: float = 0.0
    """Its declared ``resources.spot``: a spot node type (only trials asking for spot go there)."""
    live_share: float | None = None
    """A spot type's share of the on-demand price read from EC2's spot price history just now
    (``live_spot_shares``); None: the dated table's (``prices.spot_share``)."""
    nvme: bool = False
    """Its container's temporary folder (checkpoints before upload) is on the instance's local
    NVMe: its ``docker.worker_run_options`` mount ``NVME_HOST`` there."""

    @property
    def share(self) -> tuple[float, str]:
        """A spot type's share of the on-demand price and its source."""
        live = {self.instance: self.live_share} if self.live_share is not None else None
        return prices.spot_share(self.instance, live)

    @property
    def price(self) -> float | None:
        """USD per hour, when the instance type's price is known (a spot type's: its own share
        of the on-demand price, ``share``)."""
        on_demand = PRICE_PER_HOUR.get(self.instance)
        return prices.spot_price(on_demand, self.share[0]) if self.spot else on_demand


NVME_HOST = "/opt/dlami/nvme"
"""Where the Deep Learning AMI mounts an instance's local NVMe (instance store) on the host."""


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
            float(resources.get(SPOT_RESOURCE, 0)),
            nvme=any(NVME_HOST in str(o) for o in (spec.get("docker") or {}).get("worker_run_options", [])),
        )
        if name == config.get("head_node_type"):
            head = node
        else:
            workers.append(node)
    return head, workers, cap


def live_spot_shares(path: str | Path, nodes: list[NodeType]) -> tuple[list[NodeType], str]:
    """``nodes`` with the spot types' shares read from EC2's spot price history now, when the
    cluster file is AWS's and AWS credentials are at hand (``prices.credentials_present``),
    and a note saying where the spot prices come from."""
    import dataclasses

    import yaml

    config = yaml.safe_load(Path(path).read_text()) or {}
    provider = config.get("provider") or {}
    spot_types = sorted({n.instance for n in nodes if n.spot})
    table = f"the dated table ({prices.SPOT_PRICES_AS_OF})"
    if not spot_types or provider.get("type") != "aws":
        return nodes, table
    if not prices.credentials_present():
        return nodes, f"{table}; no AWS credentials here to read the current ones"
    zones = [z.strip() for z in str(provider.get("availability_zone", "")).split(",") if z.strip()]
    try:
        shares = prices.spot_shares_from_history(spot_types, provider.get("region", "us-west-2"), zones)
    except Exception as err:  # noqa: BLE001 - any failure of the API leaves the table's figures
        return nodes, f"{table}; the spot price history could not be read ({type(err).__name__})"
    updated = [dataclasses.replace(n, live_share=shares.get(n.instance)) if n.spot else n for n in nodes]
    return updated, f"EC2's spot price history now ({', '.join(sorted(shares)) or 'no prices listed'})"


def idle_minutes(path: str | Path) -> float:
    """The cluster file's ``idle_timeout_minutes`` (Ray's default, 5, when it states none):
    how long a worker node stays, billed, after its last trial."""
    import yaml

    config = yaml.safe_load(Path(path).read_text()) or {}
    return float(config.get("idle_timeout_minutes", 5))


def trials_per_node(node: NodeType, cpus: float, gpus: float, spot: bool = False) -> int:
    """How many trials asking ``cpus`` CPUs and ``gpus`` GPUs (and, with ``spot``, ``SPOT_ASK``
    of the ``spot`` resource) fit one node: ``min(floor(C_node / c), floor(G_node / g))`` over
    the resources the trial asks for (0 on a node without ``spot`` for a spot trial)."""
    if spot and node.spot < SPOT_ASK:
        return 0
    fits = [math.floor(node.cpus / cpus + 1e-9)] if cpus > 0 else []
    if gpus > 0:
        fits.append(math.floor(node.gpus / gpus + 1e-9))
    return min(fits) if fits else 0


def choose(nodes: list[NodeType], cpus: float, gpus: float, spot: bool = False) -> NodeType | None:
    """The node type the autoscaler launches for a queue of trials of ``cpus`` CPUs, ``gpus`` GPUs
    (and, with ``spot``, ``SPOT_ASK`` of the ``spot`` resource each).

    Ray 2.60's default utilization scorer (``autoscaler/_private/resource_demand_scheduler.py``)
    on each type packed with the ``n >= 1`` trials that fit it::

        score = (not (a GPU type and CPU-only trials), resource types asked for that the type has,
                 min_r C_r u_r^3, mean_r C_r u_r^3)

    over the type's resources ``r`` of capacity ``C_r >= 1``, ``u_r`` the share the trials use.
    Each cloud node also has ``memory`` (declared, or filled in by the provider; trials ask
    Ray for none, ``memory_refusal`` checks it after the choice), so the minimum is 0 and the capacity-weighted mean decides: a type whose large resource is full
    beats a small one whose every resource is (four quarter-GPU trials of 4 CPUs fill a 16-CPU
    GPU node, which beats one 4-CPU GPU node). A spot type's ``spot`` resource counts the same
    way: unused by trials that do not ask for it, it lowers the type's mean, so they go to the
    on-demand twin; a spot trial fits only types that declare it. Highest score wins, then the
    lower price per trial.
    """
    best, best_key = None, None
    for node in nodes:
        n = trials_per_node(node, cpus, gpus, spot)
        if n < 1:
            continue
        capacity = {"CPU": node.cpus, "GPU": node.gpus, "memory": node.memory or math.inf, "spot": node.spot}
        used = {"CPU": n * cpus, "GPU": n * gpus, "memory": 0.0, "spot": n * SPOT_ASK if spot else 0.0}
        weighted = [0.0 if c == math.inf else c * (used[r] / c) ** 3 for r, c in capacity.items() if c >= 1]
        matching = (cpus > 0 and node.cpus >= 1) + (gpus > 0 and node.gpus >= 1) + (spot and node.spot >= 1)
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
        values = with_variant({**experiment.config, **dict(zip(listed, combo))})
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


def checkpoint_interval(experiment) -> tuple[float, str] | None:
    """Progress between two checkpoints of a trial, in the unit of its length, and the basis:
    ``checkpoint.every`` reports of ``config.report_every`` steps each, or of one epoch each
    when the unit counts epochs (the workloads report once an epoch, or more often: then this
    is an upper bound), and never more than the trial itself (a trial whose ``report_every``
    counts something other than its length's unit, seagram's victim steps against its rounds,
    loses at most the whole trial); None when the trial's length is unknown."""
    length = experiment.trial_length()
    if not length:
        return None
    (unit, steps), every = length, experiment.checkpoint.every
    report = experiment.resolved_config().get("report_every")
    if "epoch" in unit or not report:
        interval = float(every)
        basis = f"checkpoint.every {every} reports, one report per {unit.split('/')[-1].removesuffix('s')} assumed"
    else:
        interval, basis = float(every * report), f"checkpoint.every {every} x config.report_every {report}"
    if interval > steps:
        return steps, f"{basis} is more than the trial: the whole trial"
    return interval, basis


def concurrency_cap(experiment) -> int:
    """The most trials the sweep itself lets run at once, 0 for no limit: the experiment's
    ``max_concurrent_trials`` or its searcher's ``max_concurrent`` (Tune's ConcurrencyLimiter),
    whichever is smaller."""
    caps = [cap for cap in (experiment.max_concurrent_trials, experiment.search_alg.max_concurrent) if cap]
    return min(caps) if caps else 0


def market_cost(experiment, chosen, cpus, gpus, spot, trials, running, trial_hours, head_price, cluster):
    """``(chosen, nodes at the cap, prices.SweepCost)`` of the sweep on node type ``chosen``
    (spot or on-demand): the waves at the cap, each node's start-up and idle tail, and on spot
    the re-run work of preemptions (``prices.rerun_factor``)."""
    per_node = trials_per_node(chosen, cpus, gpus, spot)
    nodes_at_cap = min(chosen.max_workers, math.ceil(running / per_node))
    at_once = min(running, nodes_at_cap * per_node)
    waves = math.ceil(trials / at_once)
    # Nodes go when idle: the last wave pays only for the nodes it still uses.
    last = trials - (waves - 1) * at_once
    work = ((waves - 1) * nodes_at_cap + math.ceil(last / per_node)) * trial_hours
    start = prices.NODE_START_MINUTES / 60
    idle = idle_minutes(cluster) / 60
    factor, rate, interval_hours = 1.0, 0.0, 0.0
    if spot:
        rate = prices.PREEMPTIONS_PER_NODE_HOUR
        interval = checkpoint_interval(experiment)
        interval_hours = interval[0] / experiment.estimate.steps_per_s / 3600 if interval else trial_hours
        restart = start + prices.CAPACITY_WAIT_MINUTES / 60  # a reclaimed pool is short
        factor = prices.rerun_factor(rate, interval_hours, restart) or math.inf
    return (
        chosen,
        nodes_at_cap,
        prices.sweep_cost(
            work, waves * trial_hours, nodes_at_cap, chosen.price, head_price, start, idle, factor, rate, interval_hours
        ),
    )


def market_lines(experiment, markets: dict, spot: bool, cluster, source: str = "") -> list[str]:
    """The dry run's spot and on-demand lines: the two node types' prices side by side (the
    spot one from its own share, ``source`` saying where the shares come from), the expected
    cost of each with the stated preemption rate, start-up and idle tail, the spot quota the
    spot nodes need, and the failure budget."""
    start, idle = prices.NODE_START_MINUTES, idle_minutes(cluster)
    lines = []
    if True not in markets:
        lines.append("#   spot: no spot node type in the cluster file holds these trials (resources.spot)")
    if len(markets) < 2:
        return lines
    (od_type, od_nodes, od), (sp_type, sp_nodes, sp) = markets[False], markets[True]
    interval = checkpoint_interval(experiment)
    unit = experiment.trial_length()[0]
    head = od.head_price
    share, basis = sp_type.share
    lines.append(
        f"#   on-demand vs spot at the cap: ${od_nodes * od_type.price + head:,.2f}/h vs "
        f"${sp_nodes * sp_type.price + head:,.2f}/h ({od_nodes} x {od_type.name} ${od_type.price:.3f} vs "
        f"{sp_nodes} x {sp_type.name} ${sp_type.price:.3f}, {share:.0%} of on-demand for {sp_type.instance} "
        f"({basis}); the head on-demand in both); this run: {'spot' if spot else 'on-demand (--spot: spot)'}"
        + (f"; spot prices: {source}" if source else "")
    )
    lines.append(
        f"#   on-demand vs spot expected: about ${_amount(od.dollars)} in {_hours(od.wall_hours)} vs "
        + (f"${_amount(sp.dollars)} in {_hours(sp.wall_hours)}" if sp.dollars != math.inf else "never (below)")
        + f", each with {start:g} min start-up per node (assumed) and the {idle:g} min idle tail "
        "(idle_timeout_minutes)"
    )
    lines.append(spot_quota_line(sp_type, sp_nodes))
    if sp.dollars == math.inf:
        lines.append(
            "#   spot: with this checkpoint interval the work never finishes in expectation; checkpoint more often"
        )
        return lines
    wait = prices.CAPACITY_WAIT_MINUTES
    lines.append(
        f"#   spot preemptions: {prices.PREEMPTIONS_PER_NODE_HOUR:g} per node-hour (assumed), "
        f"{sp.preemptions:,.2f} expected, {sp.rerun_hours:,.2f} node-hours re-run (half of a checkpoint interval each: "
        + (f"{interval[0]:,.0f} {unit}, {interval[1]}" if interval else "unknown")
        + f") plus {start:g} min start-up of a new node and {wait:g} min waiting for capacity each (assumed: "
        f"reclaims come in bursts, the pool is short)"
    )
    lines.append(failure_budget_line(experiment))
    return lines


def spot_quota_line(node: NodeType, nodes: int) -> str:
    """The spot vCPU quota the spot nodes at the cap need, by name and code."""
    vcpus = prices.VCPUS.get(node.instance)
    family = node.instance[:1]
    name, code = prices.SPOT_QUOTA.get(family, ("the instance family's spot vCPU quota", "?"))
    need = f"{nodes} x {node.instance} = {nodes * vcpus:,} vCPUs" if vcpus else f"{nodes} x {node.instance}"
    return (
        f"#   spot quota: {need} of EC2's '{name}' ({code}), separate from the on-demand quota and often 0 "
        f"on a new account (aws service-quotas get-service-quota --service-code ec2 --quota-code {code})"
    )


def failure_budget_line(experiment) -> str:
    """The share of spot trials whose reclaims alone would exhaust ``failure.max_failures``, and
    the budget spot runs get instead (``prices.failure_budget``)."""
    base = experiment.failure.max_failures
    hours = trial_exposure_hours(experiment)
    if hours is None:
        return "#   failure budget: unknown (the trial's hours are not stated)"
    rate, k = prices.PREEMPTIONS_PER_NODE_HOUR, prices.RECLAIM_DISPERSION
    mean = rate * hours
    if base < 0:
        return "#   failure budget: failure.max_failures -1 (no limit): reclaims cannot end a trial"
    exhausted = prices.reclaim_tail(mean, base)
    independent = prices.reclaim_tail(mean, base, math.inf)
    extra = prices.reclaim_allowance(mean)
    return (
        f"#   failure budget: a {_hours(hours)} trial on spot sees {mean:,.2f} reclaims on average; "
        f"{_share(exhausted)} of trials would exhaust failure.max_failures {base} by reclaims alone "
        f"(correlated reclaims, negative binomial k={k:g}; {_share(independent)} if independent); spot runs "
        f"get {base} + {extra} restarts (reclaims exceed {extra} in under 0.1% of trials), and the "
        "summary tells a reclaim from a code error"
    )


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


def _share(value: float) -> str:
    """A probability as a percentage to two significant digits (``5.4%``, ``0.0021%``)."""
    return f"{value * 100:.2g}%"


def _amount(value: float) -> str:
    """A figure to two significant digits below 10, else to the unit (``0.18``, ``1,764``)."""
    return f"{value:,.2g}" if value < 10 else f"{value:,.0f}"


def plan_text(experiment, cluster: str | Path, figures: dict | None = None, live: bool = False) -> str:
    """The ``--dry-run --cluster`` lines for one experiment; ``figures`` (a dict) receives
    ``wall_hours``, the wall time at the cap, when it is known. ``live``: spot prices from EC2's
    spot price history when credentials are at hand (``live_spot_shares``; the command line's
    dry run), else the dated table's."""
    head, nodes, _ = load(cluster)
    nodes, spot_source = (
        live_spot_shares(cluster, nodes) if live else (nodes, f"the dated table ({prices.SPOT_PRICES_AS_OF})")
    )
    resources = experiment.resources
    trials = search_space.grid_size(experiment.search) * experiment.num_samples
    name = Path(cluster).name
    cpus, gpus = trial_shape(resources)
    node = choose(nodes, cpus, gpus, resources.spot)
    if node is None:
        return (
            f"# cluster {name}: no node type holds one trial ({cpus:g} CPU, {gpus:g} GPU); "
            "its trials would wait forever"
        )
    per_node = trials_per_node(node, cpus, gpus, resources.spot)
    memory = trial_memory(experiment)
    if refusal := memory_refusal(experiment, name, nodes, node, per_node, memory):
        raise UserError(refusal)
    drivers = int(head.trial_drivers) if head and resources.uses_ray_train else 0
    running = min(trials, drivers) if drivers else trials  # trials whose workers ask for nodes
    if cap := concurrency_cap(experiment):  # the sweep's own limit: max_concurrent_trials, the searcher's
        running = min(running, cap)
    nodes_at_cap = min(node.max_workers, math.ceil(running / per_node))
    at_once = min(running, nodes_at_cap * per_node)
    head_price = head.price if head and head.price is not None else 0.0
    lines = node_lines(name, head, node, per_node, nodes_at_cap, trials, running, at_once, drivers, head_price)
    if memory and node.memory:
        lines.append(
            f"#   memory per node: {per_node} x {_gb(memory)} ({_need_basis(experiment)}) of its {_gb(node.memory)}"
        )
    shape = (cpus, gpus, trials, running, at_once, head_price)
    lines += time_and_cost_lines(experiment, cluster, nodes, node, shape, spot_source, figures)
    lines += storage_lines(experiment, node, per_node, trials)
    return "\n".join(lines)


def trial_shape(resources) -> tuple[float, float]:
    """The CPUs and GPUs one trial needs on one node: a multi-worker trial's placement group spans
    its workers' bundles (per node, the whole trial when one node holds it); else one worker's."""
    if resources.workers > 1:
        total = resources.total()
        return total["CPU"], total["GPU"]
    return resources.cpus_per_worker, resources.gpus_per_worker


def node_lines(name, head, node, per_node, nodes_at_cap, trials, running, at_once, drivers, head_price) -> list[str]:
    """The plan's first lines: the node type the trials go to, how many run at once at the cap,
    and the price per hour there."""
    per_hour = nodes_at_cap * node.price + head_price if node.price is not None else None
    return [
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


def time_and_cost_lines(experiment, cluster, nodes, node, shape, spot_source, figures) -> list[str]:
    """The sweep's trial-hours, GPU-hours, wall time and dollars at the cap, on demand and on
    spot (``market_lines``), when the file states a rate and a trial length; ``shape`` is
    ``(cpus, gpus, trials, running, at_once, head_price)``."""
    cpus, gpus, trials, running, at_once, head_price = shape
    resources, estimate = experiment.resources, experiment.estimate
    length = experiment.trial_length()
    if not (length and estimate.steps_per_s):
        return [
            "#   trial-hours, GPU-hours, wall time, dollars: unknown (the file states no "
            "estimate.steps_per_s with a stop criterion or estimate.trial_steps)"
        ]
    trial_hours = length[1] / estimate.steps_per_s / 3600
    waves = math.ceil(trials / at_once)
    wall = waves * trial_hours
    if figures is not None:
        figures["wall_hours"] = wall
    line = (
        f"#   {trials} trials x {_hours(trial_hours)} = {trials * trial_hours:,.1f} trial-hours, "
        f"{trials * trial_hours * resources.total()['GPU']:,.1f} GPU-hours; wall time at the cap "
        f"{waves} wave(s) x {_hours(trial_hours)} = {_hours(wall)}"
    )
    markets = {}
    for spot in (False, True):
        chosen = node if spot == resources.spot else choose(nodes, cpus, gpus, spot)
        if chosen is not None and chosen.price is not None:
            markets[spot] = market_cost(
                experiment, chosen, cpus, gpus, spot, trials, running, trial_hours, head_price, cluster
            )
    if resources.spot in markets:
        line += f"; about ${_amount(markets[resources.spot][2].dollars)} ({rate_text(estimate)})"
    return [line, *market_lines(experiment, markets, resources.spot, cluster, spot_source)]


def storage_lines(experiment, node: NodeType, per_node: int, trials: int) -> list[str]:
    """What the sweep's checkpoints hold in storage, and a checkpoint round's time on a node."""
    estimate = experiment.estimate
    if not estimate.checkpoint_bytes:
        return ["#   checkpoints in storage: unknown (the file states no estimate.checkpoint_bytes)"]
    keep = experiment.checkpoint.keep or 1
    stored = trials * keep * estimate.checkpoint_bytes
    return [
        f"#   checkpoints in storage: {trials} x {keep} x "
        f"{_amount(estimate.checkpoint_bytes / 1e9)} GB = {_amount(stored / 1e9)} GB "
        f"(S3 standard, us-west-2: about ${_amount(stored / 1e9 * 0.023)} per month)",
        checkpoint_round_line(experiment, node, per_node),
    ]


def checkpoint_round_line(experiment, node: NodeType, per_node: int) -> str:
    """One checkpoint round on a node: its trials' checkpoints written to the local disk (the
    instance's NVMe where the node type mounts it, else the root EBS volume at gp3's baseline)
    and uploaded, and that time's share of the trial between two checkpoints."""
    disk = "nvme" if node.nvme else "gp3"
    write, upload = prices.checkpoint_round_seconds(per_node, experiment.estimate.checkpoint_bytes, disk)
    where = "its local NVMe" if node.nvme else "the root EBS volume (gp3 baseline)"
    line = (
        f"#   checkpoint round: {per_node} x {_amount(experiment.estimate.checkpoint_bytes / 1e9)} GB per {node.name} "
        f"written to {where} in about {write:,.0f} s ({prices.DISK_WRITE_MB_S[disk]:,.0f} MB/s"
        f"{', assumed' if node.nvme else ''}) and uploaded in about {upload:,.0f} s "
        f"({prices.S3_UPLOAD_MB_S:,.0f} MB/s per node, assumed)"
    )
    interval = checkpoint_interval(experiment)
    if interval and experiment.estimate.steps_per_s:
        hours = interval[0] / experiment.estimate.steps_per_s / 3600
        line += f", every {_hours(hours)} of a trial: {(write + upload) / 3600 / hours:.1%} of its time"
    return line
