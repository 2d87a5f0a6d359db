"""What a sweep costs on a cluster: on-demand and spot prices, node start-up, the idle tail and
the work that preemptions make a sweep do again. Pure functions; ``raylab.cluster.plan`` prints
them, and the sweep takes its spot trials' failure budget from ``failure_budget``.

The figures below that are not AWS list prices are assumptions, stated as such wherever the
dry run prints them: nothing here was measured on AWS.
"""

from __future__ import annotations

from dataclasses import dataclass

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

VCPUS = {
    "m5.2xlarge": 8,
    "m5.4xlarge": 16,
    "g5.xlarge": 4,
    "g5.2xlarge": 8,
    "g5.4xlarge": 16,
    "g5.12xlarge": 48,
    "p4d.24xlarge": 96,
}
"""vCPUs per instance type: what EC2's vCPU quotas count."""

SPOT_QUOTA = {
    "g": ("All G and VT Spot Instance Requests", "L-3819A6DF"),
    "p": ("All P4, P3 and P2 Spot Instance Requests", "L-7212CCBC"),
}
"""EC2's spot vCPU quota of an instance family (Service Quotas name and code). It is separate
from the on-demand quota ("Running On-Demand G and VT instances", L-DB2E81BA) and is 0 on
many new accounts: spot trials then wait forever for nodes EC2 refuses to launch."""

SPOT_PRICES_AS_OF = "2026-11, us-west-2"
SPOT_SHARE_BY_TYPE = {"g5.xlarge": 0.50, "g5.4xlarge": 0.34}
"""A spot node's price as a share of its on-demand price, per instance type, Linux, us-west-2,
as EC2's spot price history gave it in November 2026 (``aws ec2 describe-spot-price-history
--instance-types g5.xlarge g5.4xlarge --product-descriptions Linux/UNIX``): g5.xlarge 48-51%
across the zones, g5.4xlarge about 34%. Larger types of a family are often relatively cheaper
on spot, so one share for all types misprices them. Spot prices move with demand; the dry run
reads the current ones from the same API when AWS credentials are present
(``spot_shares_from_history``)."""

SPOT_SHARE = 0.4
"""Assumed for an instance type the table above does not list: 40% of on-demand."""


def spot_share(instance: str, live: dict[str, float] | None = None) -> tuple[float, str]:
    """The spot share of ``instance``'s on-demand price and where it comes from: the price
    history just read (``live``), the dated table, or the assumed ``SPOT_SHARE``."""
    if live and instance in live:
        return live[instance], "spot price history, now"
    if instance in SPOT_SHARE_BY_TYPE:
        return SPOT_SHARE_BY_TYPE[instance], f"spot price history, {SPOT_PRICES_AS_OF}"
    return SPOT_SHARE, "assumed"


def spot_shares_from_history(
    instance_types: list[str], region: str, zones: list[str] | None = None, client=None
) -> dict[str, float]:
    """Each instance type's spot share now: per zone the newest Linux spot price in EC2's spot
    price history, the median over the zones (``zones``, or every zone listed), divided by the
    on-demand price (``PRICE_PER_HOUR``). ``client``: a boto3 EC2 client (made for ``region``
    when None). Types without an on-demand price or a spot price are left out."""
    import datetime
    import statistics

    if client is None:
        import boto3
        from botocore.config import Config

        config = Config(connect_timeout=3, read_timeout=5, retries={"max_attempts": 1})
        client = boto3.client("ec2", region_name=region, config=config)
    since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    history = client.describe_spot_price_history(
        InstanceTypes=list(instance_types), ProductDescriptions=["Linux/UNIX"], StartTime=since
    )["SpotPriceHistory"]
    newest: dict[tuple[str, str], tuple] = {}
    for entry in history:
        key = (entry["InstanceType"], entry["AvailabilityZone"])
        if zones and entry["AvailabilityZone"] not in zones:
            continue
        if key not in newest or entry["Timestamp"] > newest[key][0]:
            newest[key] = (entry["Timestamp"], float(entry["SpotPrice"]))
    shares = {}
    for instance in instance_types:
        prices = [price for (kind, _), (_, price) in newest.items() if kind == instance]
        if prices and PRICE_PER_HOUR.get(instance):
            shares[instance] = statistics.median(prices) / PRICE_PER_HOUR[instance]
    return shares


def credentials_present(environ: dict | None = None) -> bool:
    """Whether AWS credentials are at hand without asking the instance metadata service: keys,
    a profile, a web-identity token (IRSA) or a container credentials endpoint (Pod Identity)."""
    import os

    environ = os.environ if environ is None else environ
    keys = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI")
    files = [environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials")]
    return any(environ.get(k) for k in keys) or any(os.path.isfile(f) for f in files)


PREEMPTIONS_PER_NODE_HOUR = 0.05
"""Assumed: one spot reclaim per 20 node-hours. AWS publishes interruption frequency only as
monthly buckets per instance type (its Spot Instance Advisor: <5% to >20% of instances a month),
not per hour, and GPU types are often in the upper ones; this is a pessimistic round figure, not
a measurement."""

RECLAIM_DISPERSION = 2.0
"""Assumed: reclaims are correlated. EC2 reclaims spot capacity when a zone's pool runs short,
taking back several nodes of the pool at once, so the reclaims one trial sees are not a
Poisson count but an overdispersed one: a negative binomial with this shape ``k`` (variance
``μ + μ²/k``; ``k → ∞`` is independent reclaims). Not measured: a stated assumption."""

CAPACITY_WAIT_MINUTES = 20.0
"""Assumed: after a reclaim the replacement node waits this long for capacity (the pool was
short; the autoscaler retries), on top of a node's start-up. Not measured."""


def reclaim_tail(mean: float, more_than: int, dispersion: float = RECLAIM_DISPERSION) -> float:
    """``P(N > m)`` for the reclaims ``N`` one trial sees, with ``E[N] = mean``: a negative
    binomial of shape ``k`` (``dispersion``; ``math.inf``: Poisson)::

        P(N = n) = C(n + k - 1, n) p^k (1 - p)^n,  p = k / (k + μ)
        Poisson:  P(N = n) = e^-μ μ^n / n!

    ``more_than`` < 0 (no limit) gives 0."""
    import math

    if more_than < 0 or mean <= 0:
        return 0.0
    total = 0.0
    if math.isinf(dispersion):
        term = math.exp(-mean)
        for n in range(more_than + 1):
            total += term
            term *= mean / (n + 1)
        return max(0.0, 1.0 - total)
    k = dispersion
    p = k / (k + mean)
    term = p**k  # n = 0
    for n in range(more_than + 1):
        total += term
        term *= (n + k) / (n + 1) * (1 - p)
    return max(0.0, 1.0 - total)


def reclaim_allowance(mean: float, share: float = 1e-3, dispersion: float = RECLAIM_DISPERSION) -> int:
    """The fewest extra restarts ``r`` with ``P(N > r) < share``: a failure budget that a
    trial's reclaims exhaust in fewer than ``share`` of trials."""
    r = 0
    while reclaim_tail(mean, r, dispersion) >= share:
        r += 1
    return r


DISK_WRITE_MB_S = {"nvme": 1000.0, "gp3": 125.0}
"""MB/s a node writes a checkpoint at before uploading it: gp3's baseline throughput (an EBS
volume as created without a throughput setting, AWS's figure) and, assumed, a g5's local NVMe
instance store (not measured here; its published IOPS put it well above)."""

S3_UPLOAD_MB_S = 300.0
"""Assumed: MB/s one node uploads a checkpoint to S3 at (a g5.xlarge's baseline network is
2.5 Gbit/s, about 310 MB/s). Not measured."""


def checkpoint_round_seconds(trials_per_node: int, checkpoint_bytes: float, disk: str) -> tuple[float, float]:
    """``(write, upload)`` seconds of one checkpoint round on a node: every trial on it writes
    its checkpoint to the local disk, then it goes to S3 (Ray Train persists it inside the
    trial's ``report``, so the trial waits)::

        write = n B / w_disk,   upload = n B / w_S3"""
    total_mb = trials_per_node * checkpoint_bytes / 1e6
    return total_mb / DISK_WRITE_MB_S[disk], total_mb / S3_UPLOAD_MB_S


NODE_START_MINUTES = 10.0
"""Assumed: minutes from a node's launch to its first trial, billed (EC2 boot, the image pull
and the lock's install: torch's CUDA build is about 3 GB; less with raylab's own image). The
loopback ``ray up`` tests run setup on this machine, not on AWS: not measured there."""


def spot_price(on_demand: float | None, share: float = SPOT_SHARE) -> float | None:
    """A spot node's price per hour: ``p_spot = share * p_on_demand`` (``spot_share``)."""
    return None if on_demand is None else share * on_demand


def rerun_factor(rate: float, checkpoint_hours: float, start_hours: float) -> float | None:
    """How much longer a node's work takes on spot nodes, in expectation.

    Each preemption (``rate`` per node-hour) costs the trials on that node the work since their
    last checkpoint, on average half the interval ``Δ`` between checkpoints, plus a new node's
    start-up ``S`` (with ``CAPACITY_WAIT_MINUTES`` in it: the caller's ``start_hours``); that
    time is itself exposed to preemption, so over ``W`` hours of work::

        W' = W / (1 - λ (Δ/2 + S))

    Returns ``W'/W``; None when ``λ (Δ/2 + S) >= 1`` (the work, in expectation, never finishes:
    checkpoint more often).
    """
    lost = rate * (checkpoint_hours / 2 + start_hours)
    return None if lost >= 1 else 1 / (1 - lost)


@dataclass(frozen=True)
class SweepCost:
    """One market's figures for a sweep."""

    node_hours: float
    """Worker node-hours billed: the trials' work (with re-runs), plus each node's start-up and
    idle tail."""
    wall_hours: float
    """Hours from the first launch to the last node's removal."""
    dollars: float
    """Worker node-hours at the node price, plus the head for the wall time."""
    preemptions: float = 0.0
    """Expected preemptions over the sweep."""
    rerun_hours: float = 0.0
    """Node-hours of training done again after preemptions (``preemptions x Δ/2``)."""
    head_price: float = 0.0
    """The head's price per hour (on demand, whatever the workers' market)."""


def sweep_cost(
    work_node_hours: float,
    work_wall_hours: float,
    nodes: int,
    node_price: float,
    head_price: float,
    start_hours: float,
    idle_hours: float,
    factor: float = 1.0,
    rate: float = 0.0,
    checkpoint_hours: float = 0.0,
) -> SweepCost:
    """A sweep's dollars on one market.

    ``work_node_hours`` and ``work_wall_hours``: the trials' own node-hours and wall time
    without preemption; ``nodes``: the nodes launched at the cap (each pays its start-up ``S``
    once and the autoscaler's idle timeout ``I`` once, when its last trial ends); ``factor``:
    ``rerun_factor`` (1 on demand)::

        node-hours = W factor + n (S + I)
        wall       = S + T factor + I
        dollars    = node-hours p_node + wall p_head
        preemptions = λ W factor,   re-run node-hours = preemptions Δ/2
    """
    node_hours = work_node_hours * factor + nodes * (start_hours + idle_hours)
    wall = start_hours + work_wall_hours * factor + idle_hours
    preemptions = rate * work_node_hours * factor
    return SweepCost(
        node_hours=node_hours,
        wall_hours=wall,
        dollars=node_hours * node_price + wall * head_price,
        preemptions=preemptions,
        rerun_hours=preemptions * checkpoint_hours / 2,
        head_price=head_price,
    )


def trial_exposure_hours(experiment) -> float | None:
    """A trial's hours of work (``estimate``), or None when the file states no rate and length."""
    length = experiment.trial_length()
    if not length or not experiment.estimate.steps_per_s:
        return None
    return length[1] / experiment.estimate.steps_per_s / 3600


def failure_budget(experiment) -> tuple[int, int]:
    """``(Tune's max_failures, reclaim allowance)`` for the sweep: the file's
    ``failure.max_failures`` and, for spot trials, extra restarts ``r`` that a trial's reclaims
    exceed in under 0.1% of trials (``reclaim_allowance`` at
    ``PREEMPTIONS_PER_NODE_HOUR`` over the trial's hours, 24 h when the file states none). Tune
    counts a reclaim as a failure like a code error: the allowance keeps the file's budget for
    code errors. -1 (no limit) stays -1."""
    base = experiment.failure.max_failures
    if base < 0 or not experiment.resources.spot:
        return base, 0
    hours = trial_exposure_hours(experiment) or 24.0
    extra = reclaim_allowance(PREEMPTIONS_PER_NODE_HOUR * hours)
    return base + extra, extra
