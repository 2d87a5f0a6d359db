"""PBT over trials on Ray Train workers: an exploited trial restarts its Train run from the
donor's checkpoint, with the mutated config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faults import trial_rows

from raylab import checkpoint as ckpt

REPORT_EVERY = 20
NEW_LR = 0.2  # the mutation's one value: the best trial's lr, so a restart can be checked exactly


@pytest.mark.slow
def test_pbt_exploits_a_two_worker_trial_from_the_donors_checkpoint(smoke_sweep):
    results, run_path, _ = smoke_sweep(
        "toy",
        "resources.workers=2", "resources.cpus_per_worker=0.5",  # two trials at once on 2 CPUs
        "config.steps=120", f"config.report_every={REPORT_EVERY}", "config.step_time_s=0.01",
        "search.lr=[0.0005, 0.2]", "search.seed=[0]", "num_samples=1",
        "checkpoint.every=1", "checkpoint.keep=null",  # a donor checkpoint outlives the wait
        "scheduler.type=pbt", "scheduler.perturbation_interval=3",  # one exploit point, mid-run
        f"scheduler.hyperparam_mutations={{lr: [{NEW_LR}]}}", "scheduler.resample_probability=1.0",
        "scheduler.quantile_fraction=0.5",
        run_name="pbt",
    )
    assert all(result.error is None for result in results), [r.error for r in results]
    run = Path(run_path)
    exploits = [json.loads(line) for policy in run.glob("pbt_policy_*.txt")
                for line in policy.read_text().splitlines() if line.strip()]
    assert exploits, "PBT never exploited"
    assert all(new_config["lr"] == NEW_LR for *_, new_config in exploits)  # mutated configs
    # Tune tags a trial by its index in the sweep ("1_lr=0.0005,seed=0"); its id ends with it.
    trials = {int(rows[0]["trial_id"].rsplit("_", 1)[-1]): (folder, rows)
              for folder, rows in trial_rows(run).items() if rows}
    by_index = {index: rows for index, (_, rows) in trials.items()}
    donor_rows, donor_checkpoints = {}, {}
    for target_tag, clone_tag, *_ in exploits:
        target, clone = (int(tag.split("_", 1)[0]) for tag in (target_tag, clone_tag))
        donor_rows.setdefault(target, {}).update({row["train/step"]: row for row in by_index[clone]})
        donor_checkpoints.setdefault(target, set()).update(
            ckpt.load(path)["step"] for path in trials[clone][0].glob("checkpoint_*")
            if (path / ckpt.META_FILE).exists())
    # Each Train run of a trial reports the step it resumed from: where that changes, the
    # exploited trial's Train run restarted, from a step its donor checkpointed (not step 0).
    # Tune may leave out of result.json a report that arrives as a trial is paused, so the
    # donor's checkpoints are read from its folder. Tune restores the trial's iteration count
    # from the donor's checkpoint, so rows are matched by step, not by the policy's iterations.
    restarts = [
        (index, row) for index, rows in by_index.items() if index in donor_rows
        for prev, row in zip(rows, rows[1:])
        if row["train/resumed_from_step"] != prev["train/resumed_from_step"]
    ]
    assert restarts, f"no exploited trial reported after a restart: {exploits}"
    for index, row in restarts:
        resumed, donors = row["train/resumed_from_step"], donor_rows[index]
        assert resumed >= REPORT_EVERY and resumed in donor_checkpoints[index], (
            row, sorted(donor_checkpoints[index]))
        assert row["config"]["lr"] == NEW_LR, row["config"]
        # Same weights at the restart step, same lr, same batches: the exploited trial's report
        # is the donor's own report at that step, which only the donor's checkpoint gives.
        twin = donors.get(row["train/step"])
        # (Only where the donor's run that reported it went through the restart step itself,
        # and where result.json kept that report: Tune can leave out one that arrives as the
        # donor is paused, as in one CI run, so the comparison cannot be required.)
        if twin and twin["config"]["lr"] == NEW_LR and twin["train/resumed_from_step"] <= resumed:
            assert row["eval/mse"] == pytest.approx(twin["eval/mse"], rel=1e-5), (row, twin)
