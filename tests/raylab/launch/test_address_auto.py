"""``--address auto`` is resolved as ``ray.init`` resolves it and checked before Ray waits on it:
a stale address file (the last ``ray start`` here has stopped) is one line and exit code 2 within
seconds, where Ray itself waits for minutes. No test here starts Ray."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from raylab.errors import UserError
from raylab.launch import ray_start

REPO = Path(__file__).resolve().parents[3]


def dead_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends: nothing listens


def stale_ray_temp(tmp_path: Path, address: str) -> Path:
    """A Ray temp root whose address file names ``address``, as a stopped ``ray start`` leaves it."""
    (tmp_path / "ray").mkdir(parents=True)
    (tmp_path / "ray" / "ray_current_cluster").write_text(address + "\n")
    return tmp_path


@pytest.mark.parametrize("how", ["address file", "RAY_ADDRESS"])
def test_auto_with_a_dead_cluster_is_one_line_and_exit_2_within_15_s(how, tmp_path):
    address = dead_address()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONWARNINGS"] = "ignore"
    if how == "address file":
        env["RAY_TMPDIR"] = str(stale_ray_temp(tmp_path / "raytmp", address))
        source = str(tmp_path / "raytmp" / "ray" / "ray_current_cluster")
    else:
        env["RAY_ADDRESS"] = address
        source = "RAY_ADDRESS"
    proc = subprocess.run(  # a hang (Ray's own wait is minutes) fails the test at 15 s
        [sys.executable, "-m", "raylab.tune", "toy", "--smoke", "--address", "auto"]
        + ["--storage", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=15,
    )
    err = proc.stderr.strip()
    assert proc.returncode == 2, err
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"error: --address auto: cannot reach Ray cluster at {address} (from {source}")
    assert "ray start --head" in err
    assert not (tmp_path / "results").exists()


def test_auto_resolves_as_ray_does(tmp_path):
    live, stale = "10.0.0.5:6379", "127.0.0.1:1"
    temp = stale_ray_temp(tmp_path, stale)
    assert ray_start.ray_address_file({"RAY_TMPDIR": str(temp)}) == str(temp / "ray" / "ray_current_cluster")
    assert ray_start.resolved_address("auto", {"RAY_TMPDIR": str(temp)})[0] == stale
    assert ray_start.resolved_address("auto", {"RAY_TMPDIR": str(temp), "RAY_ADDRESS": live}) == (live, "RAY_ADDRESS")
    assert ray_start.resolved_address(live, {"RAY_TMPDIR": str(temp)}) == (live, None)
    # no address file, no RAY_ADDRESS: Ray finds a running local Ray itself, or fails at once
    assert ray_start.resolved_address("auto", {"RAY_TMPDIR": str(tmp_path / "none")}) == ("auto", None)
    ray_start.check_reachable("auto")  # nothing to check
    with pytest.raises(UserError, match="expected auto or HOST:PORT"):
        ray_start.check_reachable("no-port-here")
    with pytest.raises(UserError, match=f"cannot reach Ray cluster at {stale}"):
        ray_start.check_reachable(stale)
