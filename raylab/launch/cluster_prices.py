"""What a sweep costs on a cluster: on-demand and spot prices, node start-up, the idle tail and
the work that preemptions make a sweep do again. Pure functions; ``cluster_plan`` prints them.

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

SPOT_SHARE = 0.4
"""Assumed: a spot node costs 40% of its on-demand price. Spot prices move with demand, by
region and zone; AWS advertises up to 90% off and the issue cites 70-90% savings, GPU types in
busy regions save less. Not read from AWS here (no network): ``aws ec2
describe-spot-price-history --instance-types g5.xlarge --product-descriptions Linux/UNIX``
prints the current ones."""

PREEMPTIONS_PER_NODE_HOUR = 0.05
"""Assumed: one spot reclaim per 20 node-hours. AWS publishes interruption frequency only as
monthly buckets per instance type (its Spot Instance Advisor: <5% to >20% of instances a month),
not per hour, and GPU types are often in the upper ones; this is a pessimistic round figure, not
a measurement."""

NODE_START_MINUTES = 10.0
"""Assumed: minutes from a node's launch to its first trial, billed (EC2 boot, the image pull
and the lock's install: torch's CUDA build is about 3 GB; less with raylab's own image). The
loopback ``ray up`` tests run setup on this machine, not on AWS: not measured there."""


def spot_price(on_demand: float | None) -> float | None:
    """A spot node's assumed price per hour: ``p_spot = SPOT_SHARE * p_on_demand``."""
    return None if on_demand is None else SPOT_SHARE * on_demand


def rerun_factor(rate: float, checkpoint_hours: float, start_hours: float) -> float | None:
    """How much longer a node's work takes on spot nodes, in expectation.

    Each preemption (``rate`` per node-hour) costs the trials on that node the work since their
    last checkpoint, on average half the interval ``Δ`` between checkpoints, plus a new node's
    start-up ``S``; that time is itself exposed to preemption, so over ``W`` hours of work::

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
