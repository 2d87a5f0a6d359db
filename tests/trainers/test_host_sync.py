"""No per-step host sync in the training loops: .item()/.cpu()/.tolist()/float() counted by line.

A device-to-host read (``.item()``, ``.cpu()``, ``.tolist()``, ``float(tensor)``) waits for the
GPU to finish everything queued. Once per report is fine; once per optimizer step stalls the
GPU every step. The test patches those methods of ``torch.Tensor`` to note, for each calling
line, between which training steps (``backward`` calls) it read the device; it runs a
workload's smoke trial in this process (``raylab.train.run_local``) and fails for any line of
``trainers/`` that read in at least 90% of the steps (an evaluation's many reads at a report
fall between two steps only). The positive control is a planted per-step ``.item()``.
"""

from __future__ import annotations

import collections
import math
import os
import sys
from pathlib import Path

import pytest
import torch

LONG = pytest.mark.skipif(
    os.environ.get("RAYLAB_DEVICE_TESTS") != "1", reason="long (minutes, or the network): RAYLAB_DEVICE_TESTS=1 runs it"
)
REPO = Path(__file__).resolve().parents[2]
READS = ("item", "cpu", "tolist", "__float__")
STEP = [0]  # training steps so far, counted by the test's patched backward


@pytest.fixture
def host_reads(monkeypatch):
    """(file, line) -> the step numbers (``STEP[0]``, set by the test) its reads fell in."""
    counts: collections.defaultdict = collections.defaultdict(set)
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):
            caller = sys._getframe(1)
            path = Path(caller.f_code.co_filename)
            if REPO in path.parents:
                counts[(str(path.relative_to(REPO)), caller.f_lineno)].add(STEP[0])
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


def per_step_lines(counts, steps: int, prefix: str = "trainers/") -> dict:
    """Lines under ``prefix`` that read the device in at least 90% of the steps."""
    return {k: len(v) for k, v in counts.items() if k[0].startswith(prefix) and len(v) >= 0.9 * steps}


def test_positive_control_a_planted_per_step_item_is_flagged(host_reads):
    w = torch.zeros(3, requires_grad=True)
    losses = []
    for step in range(20):
        STEP[0] = step
        loss = (w - 1).pow(2).sum()
        loss.backward()
        losses.append(loss.item())  # planted: one sync per step
        if step % 10 == 9:
            reported = [loss.item() for _ in range(30)]  # many reads, at two reports only
    here = str(Path(__file__).resolve().relative_to(REPO))
    flagged = per_step_lines(host_reads, 20, here)
    assert len(flagged) == 1 and len(reported) == 30, dict(host_reads)


# experiment -> overrides that make many optimizer steps per report (small batches, one epoch)
CASES = {
    "backdoor": [
        "config.early_epochs=0",
        "config.epochs=1",
        "config.synthetic_train_size=256",
        "config.batch_size=8",
        "config.amp_bf16=true",
        "config.channels_last=true",
    ],
    "fair_adv": [
        "config.epochs=2",
        "config.frl_finetune_epochs=1",
        "config.synthetic_train=96",
        "config.batch_size=8",
        "config.lr_milestones=[1]",
    ],
}


@LONG  # two smoke trials in this process: one to four minutes each on two busy cores
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_no_line_of_the_loop_reads_the_device_every_step(name, host_reads, tmp_path, monkeypatch):
    from raylab import experiment as experiments
    from raylab import train
    from raylab.run_folder import TrialFolder

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    backward = torch.Tensor.backward
    STEP[0] = 0

    def counted_backward(self, *args, **kwargs):
        STEP[0] += 1
        return backward(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "backward", counted_backward)
    exp = experiments.load(name, CASES[name], smoke=True)
    config, _ = train.single_config(exp)
    rows = train.run_local(exp, TrialFolder.at(tmp_path / "trial"), config, verbose=False)
    steps = STEP[0]  # training steps: one backward pass each
    reports = len(rows)
    table = sorted(
        ((len(v), f"{f}:{ln}") for (f, ln), v in host_reads.items() if f.startswith("trainers/")), reverse=True
    )
    print(f"{name}: {steps} steps, {reports} reports; reads by line: {table[:8]}")
    assert steps > 2 * reports, (steps, reports)  # else per-step and per-report reads look alike
    assert not per_step_lines(host_reads, steps), table
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert losses and all(math.isfinite(v) for v in losses), losses  # backdoor: under bf16 autocast
