"""The dry run's dollars: spot and on-demand side by side, preemption re-runs, start-up and idle tail.

The formulas (``raylab/cluster/prices.py``) against hand-computed values, then the
``--dry-run --cluster`` lines they feed, on cluster/gpu.yaml and on edited copies of it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from raylab import experiment as experiments
from raylab.cluster import plan, prices

REPO = Path(__file__).resolve().parents[3]
GPU_YAML = REPO / "cluster" / "gpu.yaml"


def test_spot_price_is_the_stated_share():
    assert prices.spot_price(1.0) == pytest.approx(prices.SPOT_SHARE)
    assert prices.spot_price(None) is None


def test_rerun_factor_by_hand():
    # λ = 0.05/h, Δ = 1 h, S = 10 min: each preemption costs 0.5 + 1/6 h; 1 / (1 - 0.05 x 2/3) = 1.034483
    assert prices.rerun_factor(0.05, 1.0, 1 / 6) == pytest.approx(1 / (1 - 0.05 * (0.5 + 1 / 6)))
    assert prices.rerun_factor(0.05, 1.0, 1 / 6) == pytest.approx(1.034483, abs=1e-6)
    assert prices.rerun_factor(0.0, 5.0, 1.0) == 1.0
    assert prices.rerun_factor(0.5, 4.0, 0.0) is None  # one preemption per checkpoint interval's half


def test_sweep_cost_by_hand():
    # 10 node-hours of work over 5 h, 2 nodes at $1/h, head $0.5/h, 10 min start-up and idle each
    cost = prices.sweep_cost(10.0, 5.0, 2, 1.0, 0.5, 1 / 6, 1 / 6)
    assert cost.node_hours == pytest.approx(10 + 2 * (1 / 3))
    assert cost.wall_hours == pytest.approx(5 + 1 / 3)
    assert cost.dollars == pytest.approx(10 + 2 / 3 + 0.5 * (5 + 1 / 3))
    assert cost.preemptions == 0 and cost.rerun_hours == 0
    spot = prices.sweep_cost(10.0, 5.0, 2, 0.4, 0.5, 1 / 6, 1 / 6, factor=1.1, rate=0.05, checkpoint_hours=1.0)
    assert spot.node_hours == pytest.approx(11 + 2 / 3)
    assert spot.wall_hours == pytest.approx(5.5 + 1 / 3)
    assert spot.preemptions == pytest.approx(0.05 * 11)
    assert spot.rerun_hours == pytest.approx(0.05 * 11 * 0.5)


def dollars(text: str) -> float:
    return float(re.search(r"; about \$([\d,.]+) \(", text).group(1).replace(",", ""))


def pair(text: str) -> tuple[float, float]:
    match = re.search(r"on-demand vs spot expected: about \$([\d,.]+) in .* vs \$([\d,.]+) in", text)
    return tuple(float(g.replace(",", "")) for g in match.groups())


def test_every_gpu_experiment_prints_both_markets_and_spot_is_cheaper():
    """With --spot (the lines are the same without it, but for the node line and "this run"),
    every shipped GPU experiment whose plan is not refused prints both $/h and both expected
    totals; spot is the cheaper at the assumed share and rate."""
    from raylab import search_space
    from raylab.errors import UserError

    checked = 0
    for path in sorted((REPO / "tune_configs").glob("*.yaml")):
        exp = experiments.load(path.stem, ["resources.spot=true"])
        if not exp.resources.gpus_per_worker or not search_space.grid_size(exp.search):
            continue
        try:
            text = plan.plan_text(exp, GPU_YAML)
        except UserError:
            continue  # refused by memory (dqn_softlinf_rllib): no prices
        hourly = re.search(r"on-demand vs spot at the cap: \$([\d,.]+)/h vs \$([\d,.]+)/h", text)
        assert hourly, (path.stem, text)
        assert float(hourly.group(2).replace(",", "")) < float(hourly.group(1).replace(",", ""))
        on_demand, spot = pair(text)
        assert spot < on_demand, path.stem
        assert "preemptions: 0.05 per node-hour (assumed)" in text, path.stem
        checked += 1
    assert checked >= 14


def test_the_idle_tail_is_the_yamls_and_enters_the_dollars(tmp_path):
    """Raising idle_timeout_minutes by 50 adds 50 billed minutes to each node at the cap and the head."""
    exp = experiments.load("fair_adv", [])
    base = plan.plan_text(exp, GPU_YAML)
    config = yaml.safe_load(GPU_YAML.read_text())
    config["idle_timeout_minutes"] += 50
    longer = tmp_path / "gpu.yaml"
    longer.write_text(yaml.safe_dump(config))
    text = plan.plan_text(exp, longer)
    nodes = int(re.search(r"at the cap (\d+) x gpu_small \(of", text).group(1))
    added = 50 / 60 * (nodes * prices.PRICE_PER_HOUR["g5.xlarge"] + prices.PRICE_PER_HOUR["m5.2xlarge"])
    assert dollars(text) - dollars(base) == pytest.approx(added, abs=1.0)  # the printed figure is rounded to $1
    assert "the 60 min idle tail (idle_timeout_minutes)" in text


def test_spot_plans_the_spot_twin_and_a_cluster_without_spot_says_so(tmp_path):
    exp = experiments.load("backdoor", ["resources.spot=true"])
    text = plan.plan_text(exp, GPU_YAML)
    assert re.search(r"# cluster gpu.yaml: gpu_small_spot \(g5.xlarge", text), text
    assert "this run: spot" in text
    on_demand, spot = pair(text)
    assert dollars(text) == pytest.approx(spot, rel=0.05)  # the run's own figure is the spot one
    config = yaml.safe_load(GPU_YAML.read_text())
    for name in ("gpu_small_spot", "gpu_shared_spot"):
        del config["available_node_types"][name]
    plain = tmp_path / "gpu.yaml"
    plain.write_text(yaml.safe_dump(config))
    text = plan.plan_text(experiments.load("backdoor", []), plain)
    assert "no spot node type in the cluster file" in text and "on-demand vs spot" not in text
    assert "no node type holds one trial" in plan.plan_text(exp, plain)


def test_a_longer_checkpoint_interval_costs_more_rerun_on_spot():
    """Positive control of the re-run term: checkpointing 4x less often raises the spot figure
    and the re-run node-hours, and leaves the on-demand figure as it was."""
    often = plan.plan_text(experiments.load("dqn_softlinf", []), GPU_YAML)
    rarely = plan.plan_text(experiments.load("dqn_softlinf", ["checkpoint.every=80"]), GPU_YAML)
    rerun = [float(re.search(r"expected, ([\d,.]+) node-hours re-run", t).group(1)) for t in (often, rarely)]
    assert rerun[1] == pytest.approx(4 * rerun[0], rel=0.05)
    assert pair(rarely)[0] == pair(often)[0] and pair(rarely)[1] > pair(often)[1]


def test_checkpoint_interval_basis():
    assert plan.checkpoint_interval(experiments.load("dqn_softlinf", [])) == (
        1_000_000.0,
        "checkpoint.every 20 x config.report_every 50000",
    )
    interval, basis = plan.checkpoint_interval(experiments.load("fair_adv", []))
    assert interval == 5.0 and "one report per epoch assumed" in basis
    assert math.isfinite(interval)


def test_a_checkpoint_interval_is_never_longer_than_the_trial():
    """seagram_baselines' ``report_every`` (20) counts victim steps, its length one attack: the
    interval is the whole trial (1 attack), not 20 trials, and its spot work finishes."""
    interval, basis = plan.checkpoint_interval(experiments.load("seagram_baselines", []))
    assert interval == 1.0 and basis.endswith("is more than the trial: the whole trial")
    assert "never finishes" not in plan.plan_text(experiments.load("seagram_baselines", []), GPU_YAML)
