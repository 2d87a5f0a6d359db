"""Preemption as an ordinary fault, on the loopback ``ray up`` cluster of cluster/gpu.yaml.

``loopback_preemption.py`` brings the cluster up with Ray's own ``ray up`` (sshd nodes on
127.0.0.x, each in its own PID namespace), runs a two-trial toy sweep from the head onto the
loopback S3 server, and mid-sweep reclaims worker 127.0.0.2 as a spot instance is reclaimed:
every process of that node killed at once (sshd included: nothing there answers again) and the
instance listed as terminated. Standing in for the cloud, the harness boots a fresh machine at
that IP when Ray's autoscaler asks for a node again; the autoscaler sets it up itself.

Shown from the bucket (result.json rows, error files) and Ray's node list: the reclaimed trial
restarts from its last S3 checkpoint on another Ray node, each trial's reports are the steps
10, 20, ..., 400 once each (none lost, none duplicated), the sweep finishes, the autoscaler
brings a node back, and the trial on the surviving worker is never restarted (Ray's bug #50187:
Tune killing a trial whose driver is alive when a node goes). The control (checkpoints off:
``checkpoint.every`` past the trial's reports) makes the same check fail.

Each run takes 6-9 minutes (``ray up``, the sweep, the replacement's setup): marked long. One
loopback cluster at a time on a machine (they share port 22 and Ray's 6379): the harness refuses
to start beside another.
Needs root, namespaces, openssh-server and rsync, as test_loopback_ray_up.py does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scenarios.clusters.loopback_preemption import REPORT_EVERY, STEPS

REPO = Path(__file__).resolve().parents[3]
SCRIPT = Path(__file__).with_name("loopback_preemption.py")
SURVIVOR_IP = "127.0.0.3"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.long,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a node user, namespaces, sshd"),
    pytest.mark.skipif(
        not (Path("/usr/sbin/sshd").exists() and shutil.which("rsync") and shutil.which("unshare")),
        reason="needs openssh-server, rsync and unshare (make sshd)",
    ),
]


def run_preemption(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "preemption.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        ["timeout", "-s", "KILL", "1800", "unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(SCRIPT)]
        + ["run", str(REPO / "cluster" / "gpu.yaml"), str(out), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
    return json.loads(out.read_text())


def segments(rows: list[dict]) -> list[dict]:
    """A trial's rows split where the process reporting them changes (a restart)."""
    found: list[dict] = []
    for row in rows:
        where = (row["node_id"], row["pid"])
        if not found or found[-1]["where"] != where:
            found.append({"where": where, "ip": row["node_ip"], "rows": []})
        found[-1]["rows"].append(row)
    return found


def figures(facts: dict) -> dict:
    """What the run did, per trial and on the timeline (seconds after the strike)."""
    struck = facts.get("struck", {})
    at = struck.get("at", 0)
    out: dict = {
        "struck": {k: struck.get(k) for k in ("ip", "node_id", "rows_at_strike", "checkpoints_at_strike", "killed")}
    }
    for name, trial in facts.get("trials", {}).items():
        rows = trial["rows"]
        steps = [r["train/step"] for r in rows]
        parts = segments(rows)
        reruns = [
            # Steps computed twice: from the checkpoint the restart loaded to the step the lost
            # process had reached (its last report, plus at most REPORT_EVERY - 1 unreported).
            [prev["rows"][-1]["train/step"] - nxt["rows"][0]["train/resumed_from_step"]] * 2
            for prev, nxt in zip(parts, parts[1:])
        ]
        for bounds in reruns:
            bounds[1] += REPORT_EVERY - 1
        out[name] = {
            "restarts": len(parts) - 1,
            "error_files": len(trial["errors"]),
            "segments": [
                {
                    "ip": p["ip"],
                    "node": p["where"][0][:8],
                    "steps": [p["rows"][0]["train/step"], p["rows"][-1]["train/step"]],
                    "resumed_from_step": p["rows"][0]["train/resumed_from_step"],
                    "first_row_s": p["rows"][0]["timestamp"] - at,
                    "last_row_s": p["rows"][-1]["timestamp"] - at,
                }
                for p in parts
            ],
            "rerun_steps": reruns,
            "reports": len(steps),
            "duplicated_steps": sorted({s for s in steps if steps.count(s) > 1}),
            "missing_steps": sorted(set(range(REPORT_EVERY, STEPS + 1, REPORT_EVERY)) - set(steps)),
        }
    dead = [n for n in facts.get("nodes_after", []) if n["node_id"] == struck.get("node_id")]
    new = [
        n
        for n in facts.get("nodes_after", [])
        if n["node_ip"] == struck.get("ip") and n["node_id"] != struck.get("node_id") and n["state"] == "ALIVE"
    ]
    sweep = facts.get("sweep", {})
    out["timeline_s"] = {
        "ray_marked_dead": dead[0]["end_time_ms"] / 1000 - at if dead and dead[0]["end_time_ms"] else None,
        "autoscaler_created_node": (facts.get("launch_requested_at") or at) - at or None,
        "replacement_raylet_started": new[0]["start_time_ms"] / 1000 - at if new else None,
        "sweep_started": sweep.get("started", at) - at,
        "sweep_ended": sweep.get("ended", at) - at,
    }
    out["replacement"] = {"node": new[0]["node_id"][:8], "ip": new[0]["node_ip"]} if new else None
    out["up_s"] = facts.get("up", {}).get("s")
    return out


def check_preemption(facts: dict) -> None:
    """Every claim of the module docstring; an AssertionError names the first that fails."""
    assert "error" not in facts, facts["error"]
    assert facts["up"]["rc"] == 0, facts["up"]["tail"]
    struck = facts["struck"]
    assert {"sshd", "raylet"} <= set(struck["killed"]) and not struck["left"], struck
    sweep = facts["sweep"]
    assert sweep["rc"] == 0, ("the sweep did not finish", sweep["tail"])
    trials = facts["trials"]
    assert len(trials) == 2, trials.keys()
    by_start = {segments(t["rows"])[0]["ip"]: name for name, t in trials.items()}
    assert set(by_start) == {struck["ip"], SURVIVOR_IP}, by_start  # one trial on each worker
    lost, survivor = trials[by_start[struck["ip"]]], trials[by_start[SURVIVOR_IP]]
    dead = next(n for n in facts["nodes_after"] if n["node_id"] == struck["node_id"])
    assert dead["state"] == "DEAD", dead

    # The surviving worker's trial: one process from start to end, reporting after Ray had
    # declared the reclaimed node dead (#50187: Tune must not kill it).
    (kept,) = segments(survivor["rows"])
    assert kept["ip"] == SURVIVOR_IP and not survivor["errors"], (kept["ip"], survivor["errors"])
    assert all(r["train/resumed_from_step"] == 0 for r in kept["rows"])
    assert kept["rows"][-1]["timestamp"] > dead["end_time_ms"] / 1000, "the surviving trial ended before the node died"

    # The reclaimed trial: restarted on another Ray node, from its last checkpoint in the bucket.
    parts = segments(lost["rows"])
    assert parts[0]["where"][0] == struck["node_id"] and len(parts) >= 2, [p["where"] for p in parts]
    assert all(p["where"][0] != struck["node_id"] for p in parts[1:]), [p["where"] for p in parts]
    resumed = parts[1]["rows"][0]["train/resumed_from_step"]
    last_reported = parts[0]["rows"][-1]["train/step"]
    assert resumed > 0 and resumed == last_reported, (
        f"the restart resumed from step {resumed}, not from the checkpoint of its last report (step {last_reported})"
    )

    # No completed report lost or duplicated, and every trial ran to the end.
    for name, trial in trials.items():
        steps = [r["train/step"] for r in trial["rows"]]
        assert steps == list(range(REPORT_EVERY, STEPS + 1, REPORT_EVERY)), (name, steps)

    # The autoscaler brought a node back: a new Ray node at the reclaimed IP, set up from scratch.
    assert facts["launch_requested_at"], facts["monitor_log"][-20:]
    new = [n for n in facts["nodes_after"] if n["node_ip"] == struck["ip"] and n["state"] == "ALIVE"]
    assert new and new[0]["node_id"] != struck["node_id"], facts["nodes_after"]
    checked = facts["node_check"]
    assert isinstance(checked, list) and len(checked) == 3, checked
    (replacement,) = [n for n in checked if n["ip"] == struck["ip"]]
    assert all(p.startswith(replacement["home"] + "/raylab") for p in replacement["raylab"]), replacement


def test_a_spot_reclaimed_worker_s_trial_resumes_from_s3_and_the_other_trial_runs_on(tmp_path):
    facts = run_preemption(tmp_path)
    print("PREEMPTION " + json.dumps(figures(facts)))
    print("\n".join(facts.get("monitor_log", [])[-25:]))
    check_preemption(facts)


@pytest.mark.skipif(os.environ.get("RAYLAB_FULL_CLUSTER") != "1", reason="set RAYLAB_FULL_CLUSTER=1 (6-9 minutes)")
def test_control_without_checkpoints_the_preemption_check_fails(tmp_path):
    """The same run with checkpoints off (``checkpoint.every`` past the trial's 40 reports: only
    the final one saves): the reclaimed trial starts over from step 0, re-reporting its steps."""
    facts = run_preemption(tmp_path, "--checkpoint-every", "100000")
    print("PREEMPTION " + json.dumps(figures(facts)))
    assert "error" not in facts and facts["up"]["rc"] == 0, facts.get("error") or facts["up"]["tail"][-3000:]
    assert facts["sweep"]["rc"] == 0, facts["sweep"]["tail"]
    with pytest.raises(AssertionError, match="resumed from step 0") as failed:
        check_preemption(facts)
    print("the check failed as expected:", str(failed.value).splitlines()[0])
