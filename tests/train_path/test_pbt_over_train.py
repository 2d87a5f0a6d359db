"""PBT over trials on Ray Train workers: an exploited trial restarts its Train run from the
donor's checkpoint, with the mutated config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faults import trial_rows

REPORT_EVERY = 20


@pytest.mark.slow
@pytest.mark.skip(reason="PBT over Ray Train trials is not yet shown to work: in the full suite an "
                  "exploited trial restarted 140 steps past its donor's checkpoint, and the test "
                  "took 12 minutes; open work")
def test_pbt_exploits_a_two_worker_trial_from_the_donors_checkpoint(smoke_sweep):
    results, run_path, _ = smoke_sweep(
        "toy",
        "resources.workers=2", "resources.cpus_per_worker=0.5",  # two trials at once on 2 CPUs
        "config.steps=240", f"config.report_every={REPORT_EVERY}", "config.step_time_s=0.01",
        "search.lr=[0.0005, 0.2]", "search.seed=[0]", "num_samples=2",
        "checkpoint.every=1", "checkpoint.keep=null",  # a donor checkpoint outlives the wait
        "scheduler.type=pbt", "scheduler.perturbation_interval=2",
        "scheduler.hyperparam_mutations={lr: [0.1, 0.2]}", "scheduler.resample_probability=1.0",
        "scheduler.quantile_fraction=0.5",
        run_name="pbt",
    )
    assert all(result.error is None for result in results), [r.error for r in results]
    run = Path(run_path)
    exploits = [json.loads(line) for policy in run.glob("pbt_policy_*.txt")
                for line in policy.read_text().splitlines() if line.strip()]
    assert exploits, "PBT never exploited"
    # Tune tags a trial by its index in the sweep ("1_lr=0.0005,seed=0"); its id ends with it.
    by_index = {int(rows[0]["trial_id"].rsplit("_", 1)[-1]): rows
                for rows in trial_rows(run).values() if rows}
    checked = 0
    for target_tag, clone_tag, target_iter, clone_iter, _, new_config in exploits:
        target, clone = (by_index[int(tag.split("_", 1)[0])] for tag in (target_tag, clone_tag))
        assert new_config["lr"] in (0.1, 0.2)  # the mutated config
        if len(target) <= target_iter:
            continue  # exploited at its last report
        restarted = target[target_iter]  # the target's first row after the exploit
        # The restarted Train run continued from a step the donor had checkpointed (its latest
        # when the exploit ran, which may be past clone_iter), not from step 0.
        assert restarted["train/step"] - REPORT_EVERY in {row["train/step"] for row in clone}
        assert restarted["train/step"] > REPORT_EVERY
        checked += 1
    assert checked, f"no exploit was followed by a report: {exploits}"
