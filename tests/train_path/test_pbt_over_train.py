"""PBT over trials on Ray Train workers: an exploited trial restarts its Train run from the
donor's checkpoint, with the mutated config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faults import trial_rows

REPORT_EVERY = 20


@pytest.mark.slow
def test_pbt_exploits_a_two_worker_trial_from_the_donors_checkpoint(smoke_sweep):
    results, run_path, _ = smoke_sweep(
        "toy",
        "resources.workers=2", "resources.cpus_per_worker=0.5",  # two trials at once on 2 CPUs
        "config.steps=120", f"config.report_every={REPORT_EVERY}", "config.step_time_s=0.01",
        "search.lr=[0.0005, 0.2]", "search.seed=[0]", "num_samples=1",
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
    assert all(new_config["lr"] in (0.1, 0.2) for *_, new_config in exploits)  # mutated configs
    # Tune tags a trial by its index in the sweep ("1_lr=0.0005,seed=0"); its id ends with it.
    by_index = {int(rows[0]["trial_id"].rsplit("_", 1)[-1]): rows
                for rows in trial_rows(run).values() if rows}
    donors = {}
    for target_tag, clone_tag, *_ in exploits:
        target, clone = (int(tag.split("_", 1)[0]) for tag in (target_tag, clone_tag))
        donors.setdefault(target, set()).update(row["train/step"] for row in by_index[clone])
    # Where an exploited trial's steps do not run on by one report, its Train run restarted:
    # from a step its donor had reported with a checkpoint (not from step 0), with the new lr.
    # (Tune restores the trial's iteration count from the donor's checkpoint, so rows are
    # matched by step, not by the iteration the policy file names.)
    restarts = [
        (index, prev, row) for index, rows in by_index.items() if index in donors
        for prev, row in zip(rows, rows[1:]) if row["train/step"] != prev["train/step"] + REPORT_EVERY
    ]
    assert restarts, f"no exploited trial reported after a restart: {exploits}"
    for index, prev, row in restarts:
        assert row["train/step"] > REPORT_EVERY, (prev, row)
        assert row["train/step"] - REPORT_EVERY in donors[index], (row["train/step"], donors[index])
        assert row["config"]["lr"] in (0.1, 0.2), row["config"]
