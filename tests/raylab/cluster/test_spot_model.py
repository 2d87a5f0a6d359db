"""Spot as it is priced and reclaimed: a share per instance type (a dated table, or EC2's spot
price history through moto's EC2), correlated reclaims and the failure budget against
hand-computed cases, the spot quota and zones, the checkpoint round, and a reclaim told apart
from a code error in the summary."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from raylab import experiment as experiments
from raylab.cluster import plan, prices
from raylab.launch import summary

REPO = Path(__file__).resolve().parents[3]
GPU_YAML = REPO / "cluster" / "gpu.yaml"


def test_reclaim_tail_by_hand():
    # 0.2 reclaims per node-hour over a 7 h trial, max_failures 3
    mu = 0.2 * 7
    poisson = 1 - math.exp(-mu) * (1 + mu + mu**2 / 2 + mu**3 / 6)
    assert prices.reclaim_tail(mu, 3, math.inf) == pytest.approx(poisson)
    assert poisson == pytest.approx(0.0537, abs=1e-4)  # "about 5% of 7-hour trials"
    # negative binomial, k = 2: p = 2 / 3.4; P(n) = C(n+1, n) p^2 (1-p)^n = (n+1) p^2 (1-p)^n
    p = 2 / (2 + mu)
    by_hand = 1 - sum((n + 1) * p**2 * (1 - p) ** n for n in range(4))
    assert prices.reclaim_tail(mu, 3, 2.0) == pytest.approx(by_hand)
    assert by_hand == pytest.approx(0.0963, abs=1e-4)  # correlated reclaims: more trials exhausted
    assert prices.reclaim_tail(mu, -1) == 0.0  # no limit
    assert prices.reclaim_tail(0.0, 0) == 0.0


def test_reclaim_allowance_by_hand():
    # Poisson(1.4): P(N > 5) = 0.0032, P(N > 6) = 0.00062 -> 6 extra restarts keep under 0.1%
    assert 1 - math.exp(-1.4) * sum(1.4**n / math.factorial(n) for n in range(6)) > 1e-3
    assert 1 - math.exp(-1.4) * sum(1.4**n / math.factorial(n) for n in range(7)) < 1e-3
    assert prices.reclaim_allowance(1.4, dispersion=math.inf) == 6
    assert prices.reclaim_allowance(1.4) > 6  # overdispersed: a longer tail
    assert prices.reclaim_allowance(0.0) == 0


def test_each_spot_type_is_priced_from_its_own_share():
    _, nodes, _ = plan.load(GPU_YAML)
    spot = {n.instance: n for n in nodes if n.spot}
    assert spot["g5.xlarge"].price == pytest.approx(0.50 * 1.006)
    assert spot["g5.4xlarge"].price == pytest.approx(0.34 * 1.624)
    assert prices.spot_share("g5.12xlarge") == (prices.SPOT_SHARE, "assumed")
    for name, instance, share in (("backdoor", "g5.xlarge", "50%"), ("dqn_softlinf", "g5.4xlarge", "34%")):
        text = plan.plan_text(experiments.load(name, ["resources.spot=true"]), GPU_YAML)
        assert f"{share} of on-demand for {instance} (spot price history, 2026-11, us-west-2)" in text, text


def test_spot_dry_runs_print_the_failure_budget_and_the_quota():
    exp = experiments.load("fair_adv", ["resources.spot=true"])
    text = plan.plan_text(exp, GPU_YAML)
    hours = prices.trial_exposure_hours(exp)
    mean = prices.PREEMPTIONS_PER_NODE_HOUR * hours
    line = next(ln for ln in text.splitlines() if "failure budget" in ln)
    share = prices.reclaim_tail(mean, exp.failure.max_failures)
    assert f"sees {mean:,.2f} reclaims on average; {share * 100:.2g}% of trials would exhaust" in line
    total, extra = prices.failure_budget(exp)
    assert total == exp.failure.max_failures + extra and extra == prices.reclaim_allowance(mean)
    assert f"spot runs get {exp.failure.max_failures} + {extra} restarts" in line
    assert "spot quota: 12 x g5.xlarge = 48 vCPUs of EC2's 'All G and VT Spot Instance Requests' (L-3819A6DF)" in text
    # on demand, Tune's budget is the file's
    assert prices.failure_budget(experiments.load("fair_adv", [])) == (exp.failure.max_failures, 0)


def test_spot_shares_from_moto_price_history(monkeypatch):
    """EC2's spot price history (moto's): the newest price per zone, the median, over the
    on-demand price; the plan names it as its source when credentials are present."""
    moto = pytest.importorskip("moto")
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    with moto.mock_aws():
        import boto3

        client = boto3.client("ec2", region_name="us-west-2")
        history = client.describe_spot_price_history(InstanceTypes=["g5.xlarge"])["SpotPriceHistory"]
        price = float(history[0]["SpotPrice"])
        shares = prices.spot_shares_from_history(["g5.xlarge", "g5.4xlarge"], "us-west-2", client=client)
        assert shares["g5.xlarge"] == pytest.approx(price / 1.006)
        assert shares["g5.4xlarge"] == pytest.approx(price / 1.624)
        assert prices.spot_shares_from_history(["g5.xlarge"], "us-west-2", ["us-west-2z"], client) == {}
        text = plan.plan_text(experiments.load("backdoor", ["resources.spot=true"]), GPU_YAML, live=True)
        table = plan.plan_text(experiments.load("backdoor", ["resources.spot=true"]), GPU_YAML)
    assert "spot prices: the dated table (2026-11, us-west-2)" in table  # tests and plain calls: the table
    assert "spot prices: EC2's spot price history now (g5.4xlarge, g5.xlarge)" in text
    assert f"{shares['g5.xlarge']:.0%} of on-demand for g5.xlarge (spot price history, now)" in text


def test_without_credentials_the_dated_table_is_used(monkeypatch, tmp_path):
    for key in (
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    assert not prices.credentials_present()
    text = plan.plan_text(experiments.load("backdoor", ["resources.spot=true"]), GPU_YAML, live=True)
    assert "spot prices: the dated table (2026-11, us-west-2); no AWS credentials here" in text


def test_gpu_yaml_lists_every_zone_that_offers_its_gpu_types():
    """moto's copy of EC2's instance-type offerings: every us-west-2 zone with the GPU types."""
    pytest.importorskip("moto")
    from moto.ec2.models.instance_types import INSTANCE_TYPE_OFFERINGS

    config = yaml.safe_load(GPU_YAML.read_text())
    listed = set(config["provider"]["availability_zone"].split(","))
    gpu_types = {
        t["node_config"]["InstanceType"] for t in config["available_node_types"].values() if t["resources"].get("GPU")
    }
    offered = {
        o["Location"]
        for o in INSTANCE_TYPE_OFFERINGS["availability-zone"][config["provider"]["region"]]
        if o["InstanceType"] in gpu_types
    }
    assert len(offered) >= 3 and offered <= listed, (offered, listed)


def test_checkpoint_round_by_hand_and_on_nvme():
    # dqn_softlinf: 2 trials x 7 GB per g5.4xlarge; gp3's 125 MB/s: 112 s; NVMe (assumed 1000 MB/s): 14 s
    write, upload = prices.checkpoint_round_seconds(2, 7e9, "gp3")
    assert write == pytest.approx(112.0) and upload == pytest.approx(14000 / 300)
    assert prices.checkpoint_round_seconds(2, 7e9, "nvme")[0] == pytest.approx(14.0)
    _, nodes, _ = plan.load(GPU_YAML)
    assert all(n.nvme == bool(n.gpus) for n in nodes)  # GPU types stage checkpoints on their NVMe
    text = plan.plan_text(experiments.load("dqn_softlinf", []), GPU_YAML)
    assert re.search(r"checkpoint round: 2 x 7 GB per gpu_shared written to its local NVMe in about 14 s", text)


def test_a_reclaim_is_told_apart_from_a_code_error():
    from ray.exceptions import NodeDiedError, RayActorError, RayTaskError

    assert summary.error_kind(None) is None
    assert summary.error_kind(RayActorError(preempted=True)) == summary.RECLAIM
    assert summary.error_kind(NodeDiedError("node 10.0.0.5 died")) == summary.RECLAIM
    lost = RayActorError(error_msg="The actor died because its node has died. Node Id: abc")
    assert summary.error_kind(lost) == summary.RECLAIM
    assert summary.error_kind(ValueError("nan loss")) == summary.CODE
    task = RayTaskError("train_loop", "Traceback ...", ValueError("nan loss"))
    assert summary.error_kind(task) == summary.CODE
    try:
        raise RuntimeError("trial failed") from NodeDiedError("node died")
    except RuntimeError as err:
        assert summary.error_kind(err) == summary.RECLAIM
