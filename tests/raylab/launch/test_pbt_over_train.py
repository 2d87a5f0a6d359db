"""PBT over trials on Ray Train workers: an exploited trial restarts its Train run from the
donor's checkpoint, with the mutated config, and finishes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from raylab import checkpoint as ckpt
from raylab.run_folder import TrialFolder

STEPS, REPORT_EVERY = 120, 20
NEW_LR = 0.2  # the mutation's one value: the best trial's lr, so a restart can be checked exactly


@pytest.mark.slow
@pytest.mark.long
def test_pbt_exploits_a_two_worker_trial_from_the_donors_checkpoint(smoke_sweep):
    results, run_path, _ = smoke_sweep(
        "toy",
        "resources.workers=2",
        "resources.cpus_per_worker=0.5",  # two trials at once on 2 CPUs
        f"config.steps={STEPS}",
        f"config.report_every={REPORT_EVERY}",
        "config.step_time_s=0.01",
        "search.lr=[0.0005, 0.2]",
        "search.seed=[0]",
        "num_samples=1",
        "checkpoint.every=1",
        "checkpoint.keep=null",  # a donor checkpoint outlives the wait
        "scheduler.type=pbt",
        "scheduler.perturbation_interval=3",  # one exploit point, mid-run
        f"scheduler.hyperparam_mutations={{lr: [{NEW_LR}]}}",
        "scheduler.resample_probability=1.0",
        "scheduler.quantile_fraction=0.5",
        run_name="pbt",
    )
    assert all(result.error is None for result in results), [r.error for r in results]
    run = Path(run_path)
    exploits = [
        json.loads(line)
        for policy in run.glob("pbt_policy_*.txt")
        for line in policy.read_text().splitlines()
        if line.strip()
    ]
    assert exploits, "PBT never exploited"
    assert all(new_config["lr"] == NEW_LR for *_, new_config in exploits)  # mutated configs
    # Tune tags a trial by its index in the sweep ("1_lr=0.0005,seed=0"); its folder name holds it.
    folders = {int(folder.name.split("_")[2]): folder for folder in run.glob("toy_*") if folder.is_dir()}
    for target, donor in {tuple(int(tag.split("_", 1)[0]) for tag in pair[:2]) for pair in exploits}:
        # The exploited trial's Train run restarted from a checkpoint of its donor, with the
        # mutated lr, and finished. result.json cannot show it reliably: Tune drops the report
        # on which PBT exploits a trial, and on 2 CPUs PBT can exploit one at every report.
        # The checkpoints can: each holds its run's step of origin and config.
        donor_states = {state["step"]: state for state in checkpoint_states(folders[donor])}
        final = checkpoint_states(folders[target])[-1]
        assert final["step"] == STEPS and final["config"]["lr"] == NEW_LR, final["config"]
        resumed = final["resumed_from_step"]
        assert resumed >= REPORT_EVERY and resumed in donor_states, (resumed, sorted(donor_states))
        # Same weights at the restart step, same lr and batches since: the donor's own final
        # weights, which the trial's own checkpoints (at lr 0.0005) could not have given.
        for name, weight in final["model"].items():
            assert torch.allclose(weight, donor_states[STEPS]["model"][name], rtol=1e-5), name


def checkpoint_states(trial_folder: Path) -> list[dict]:
    """The states of a trial folder's checkpoints, by step, then as written (an exploited trial's
    counter restarts from its donor's, so Tune can write two states under one folder name)."""
    metas = [path / ckpt.META_FILE for path in TrialFolder.at(trial_folder).checkpoint_paths()]
    written = sorted((meta for meta in metas if meta.exists()), key=lambda meta: meta.stat().st_mtime)
    return sorted((ckpt.load(meta.parent) for meta in written), key=lambda state: state["step"])
