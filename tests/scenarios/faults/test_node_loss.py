"""A node dies mid-trial (two-node cluster on this machine): the trial ends on the other one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.long
def test_trial_survives_losing_its_node(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "scenarios" / "faults" / "node_loss_sweep.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": f"{REPO}:{REPO / 'tests'}"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["removed"] and facts["error"] is None
    lost = facts["removed"][0]["node_id"]
    nodes = [row["node_id"] for row in facts["rows"]]
    assert nodes[0] == lost and nodes[-1] != lost  # started on the lost node, ended elsewhere
    steps = [row["train/step"] for row in facts["rows"]]
    moved = nodes.index(nodes[-1])
    assert 20 < steps[moved] <= facts["removed"][0]["step"] + 20  # resumed from a checkpoint
    assert facts["faulty"] == facts["reference"]  # bit-identical final metrics
