"""Temporary keys that expire before the sweep ends are a warning naming both durations."""

from __future__ import annotations

import datetime
from pathlib import Path

from raylab import tune as raylab_tune
from raylab.launch.storage_secrets import token_lifetime_warning

REPO = Path(__file__).resolve().parents[3]
NOW = datetime.datetime(2026, 12, 5, 3, 0, tzinfo=datetime.timezone.utc)


def env(hours_left: float | None) -> dict[str, str]:
    out = {"AWS_ACCESS_KEY_ID": "ASIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x", "AWS_SESSION_TOKEN": "t"}
    if hours_left is not None:
        out["AWS_CREDENTIAL_EXPIRATION"] = (
            (NOW + datetime.timedelta(hours=hours_left)).isoformat().replace("+00:00", "Z")
        )
    return out


def test_a_token_shorter_than_the_wall_time_names_both_durations():
    line = token_lifetime_warning(env(3.0), 17.4, "the plan's wall time at the cap", now=NOW)
    assert line.startswith("warning: ") and "expires in 3.0 h" in line and "wall time at the cap of 17.4 h" in line
    assert "role" in line and "\n" not in line
    assert "expires in 45 min" in token_lifetime_warning(env(0.75), 2.0, "the sweep", now=NOW)
    assert "it has expired" in token_lifetime_warning(env(-1.0), 2.0, "the sweep", now=NOW)


def test_no_warning_for_roles_or_a_token_that_outlives_the_sweep():
    assert token_lifetime_warning({"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "x"}, 30.0, "x", now=NOW) == ""
    assert token_lifetime_warning(env(20.0), 17.4, "the sweep", now=NOW) == ""
    assert token_lifetime_warning(env(3.0), None, "the sweep", now=NOW) == ""  # nothing to compare with


def test_a_token_of_unstated_lifetime_is_a_warning():
    line = token_lifetime_warning(env(None), 5.0, "the sweep", now=NOW)
    assert "unstated lifetime" in line and "never refreshed" in line


def test_the_cluster_dry_run_warns_with_the_plans_wall_time(monkeypatch, capsys):
    expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=3, minutes=1)
    for key, value in {**env(None), "AWS_CREDENTIAL_EXPIRATION": expiry.isoformat()}.items():
        monkeypatch.setenv(key, value)
    code = raylab_tune.main(["dqn_softlinf", "--dry-run", "--cluster", str(REPO / "cluster" / "gpu.yaml")])
    out, err = capsys.readouterr()
    assert code == 0, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("warning: the session token")]
    assert "expires in 3.0 h, before the plan's wall time at the cap of 25.0 h" in line
    assert "wall time at the cap 18 wave(s) x 1.4 h = 25.0 h" in out
