"""``--dry-run --cluster`` packs trials by memory as well as CPU and GPU.

gpu.yaml's node types declare ``resources.memory``; dqn_softlinf states a trial's need (its
replay as the backend stores it: RLlib's float32 frame stacks for ``backend: rllib``). A trial
larger than every node, or the trials Ray puts on one node larger than its memory, is refused in
one line naming both sizes, exit 2. Positive control: the same experiment on a node type with
more memory is planned and priced.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from raylab import experiment as experiments
from raylab import tune as raylab_tune
from raylab.cluster import plan
from raylab.errors import UserError
from trainers.dqn_softlinf import preflight

REPO = Path(__file__).resolve().parents[3]
GPU_YAML = REPO / "cluster" / "gpu.yaml"


def _dry_run(capsys, *args):
    code = raylab_tune.main(["dqn_softlinf_rllib", "--dry-run", "--cluster", str(GPU_YAML), *args])
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if line.startswith("error:")]


def _gb(count: float) -> str:
    return f"{count / 1e9:,.1f} GB"


def test_the_rllib_plan_is_refused_naming_the_trials_need_and_the_nodes_size(capsys):
    exp = experiments.load("dqn_softlinf_rllib")
    cfg = exp.resolved_config()
    need = cfg["buffer_size"] * preflight.rllib_bytes_per_transition((84, 84), cfg["frame_stack"])
    _, nodes, _ = plan.load(GPU_YAML)
    largest = max(nodes, key=lambda n: n.memory)
    assert largest.memory < need  # 1M float32 4-frame stacks do not fit a 64 GiB node's 70%
    code, out, errors = _dry_run(capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"needs {_gb(need)} of memory" in errors[0] and f"{largest.name} ({largest.instance})" in errors[0]
    assert f"has {_gb(largest.memory)}" in errors[0] and "Traceback" not in out
    assert "about $" not in out  # no price for a plan that cannot run


def test_two_trials_that_overflow_one_node_are_refused_and_one_that_fits_is_planned(capsys):
    code, _, errors = _dry_run(capsys, "config.buffer_size=300000")
    per = preflight.rllib_bytes_per_transition((84, 84), 4)
    assert code == 2 and len(errors) == 1
    assert f"2 x {_gb(300_000 * per)} = {_gb(600_000 * per)} of memory" in errors[0], errors[0]
    code, out, errors = _dry_run(capsys, "config.buffer_size=200000")
    assert code == 0 and not errors, errors
    assert "gpu_shared (g5.4xlarge, 16 CPU, 1 GPU): 2 trial(s) per node" in out


def test_control_a_node_type_with_more_memory_takes_the_full_rllib_trial(tmp_path, capsys):
    config = yaml.safe_load(GPU_YAML.read_text())
    config["available_node_types"]["gpu_shared"]["resources"]["memory"] = 256 * 10**9
    bigger = tmp_path / "gpu.yaml"
    bigger.write_text(yaml.safe_dump(config))
    text = plan.plan_text(experiments.load("dqn_softlinf_rllib"), bigger)
    assert "2 trial(s) per node" in text and "about $" in text


def test_the_rllib_estimate_is_its_own():
    rllib, raylab_backend = experiments.load("dqn_softlinf_rllib"), experiments.load("dqn_softlinf")
    # no replay in RLlib's checkpoints (checkpoint_replay: false): not the raylab backend's 7 GB
    assert rllib.estimate.checkpoint_bytes < raylab_backend.estimate.checkpoint_bytes / 100
    assert plan.trial_memory(rllib) > 10 * plan.trial_memory(raylab_backend)


def test_each_dollar_figure_says_whether_its_rate_was_measured():
    exp = experiments.load("dqn_softlinf")
    text = plan.plan_text(exp, GPU_YAML)
    assert "; about $" in text and f"(rate not measured: {exp.estimate.rate_basis})" in text
    measured = experiments.load("dqn_softlinf", ["estimate.rate_measured=benchmarks/dqn_throughput.py on an A10G"])
    assert "(rate measured: benchmarks/dqn_throughput.py on an A10G)" in plan.plan_text(measured, GPU_YAML)


def test_a_stated_memory_need_overrides_the_workloads():
    exp = experiments.load("toy", ["estimate.memory_bytes=60e9"], smoke=True)
    assert plan.trial_memory(exp) == 60e9
    with pytest.raises(UserError, match=r"needs 60.0 GB of memory \(the file's estimate.memory_bytes\)"):
        plan.plan_text(exp, GPU_YAML)
