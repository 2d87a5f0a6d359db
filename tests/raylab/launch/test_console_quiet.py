"""Ray's own console lines below ERROR stay off a sweep's console unless ``--verbose``: its
token-authentication WARNING, Tune's bottleneck warnings, and the messages raylets push to the
driver (in yellow, ANSI codes), which go to a file in the Ray session's log folder instead."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from raylab.launch import ray_start

REPO = Path(__file__).resolve().parents[3]
RAY_NOISE = re.compile(r"WARNING|core_worker|\x1b\[|\(raylet\)")
"""A console line of Ray's own: a warning, a C++ core worker line, colour codes, a raylet message."""


def user_env() -> dict[str, str]:
    """This environment as a user's shell has it: no test Ray to join, Ray's defaults for token
    authentication (Ray 2.60 turns it on for a local Ray and says so in a WARNING)."""
    drop = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAYLAB_TEST_RAY_ADDRESS")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "OMP_NUM_THREADS": "1"}


def run(args: list[str], tmp_path: Path) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=user_env(),
        timeout=300,
    )
    console = done.stdout + done.stderr
    print(console)
    return done.returncode, console.splitlines()


@pytest.mark.slow
def test_a_default_smoke_sweep_prints_no_line_of_rays_own(tmp_path):
    code, lines = run(
        ["-m", "raylab.tune", "toy", "--smoke", "search.seed=[0]", "--storage", str(tmp_path / "r"), "--name", "c"],
        tmp_path,
    )
    assert code == 0
    assert any(line.startswith("results: ") for line in lines)  # the sweep ran to its end
    assert [line for line in lines if RAY_NOISE.search(line)] == []


@pytest.mark.slow
def test_raylet_messages_go_to_rays_log_folder_and_verbose_shows_them(tmp_path):
    script = str(REPO / "tests/raylab/launch/ray_messages_script.py")
    # Positive control: with --verbose's settings both Ray's token WARNING and the raylet's
    # message about the planted worker death reach the console.
    code, lines = run([script, "verbose"], tmp_path)
    assert code == 0 and "planted: a worker died" in lines
    assert any("WARNING" in line and "Token authentication" in line for line in lines)
    assert any("\x1b[33m(raylet)\x1b[0m A worker died" in line for line in lines)
    code, lines = run([script, "quiet"], tmp_path)
    assert code == 0 and "planted: a worker died" in lines
    assert [line for line in lines if RAY_NOISE.search(line)] == []
    diverted = Path(next(line for line in lines if line.startswith("ray messages: ")).split(": ", 1)[1])
    assert diverted.parent.name == "logs" and diverted.parent.parent.name.startswith("session_")
    assert "(raylet)\x1b[0m A worker died" in diverted.read_text()


def test_only_rays_message_thread_is_diverted(tmp_path):
    console = io.StringIO()
    stream = ray_start._ThreadToFile(console, ray_start.RAY_MESSAGES_THREAD, str(tmp_path / "logs" / "m.log"))
    stream.write("raylab's own line\n")
    writer = threading.Thread(
        target=stream.write, args=("(raylet) WARNING: pushed\n",), name=ray_start.RAY_MESSAGES_THREAD
    )
    writer.start()
    writer.join()
    assert console.getvalue() == "raylab's own line\n"
    assert (tmp_path / "logs" / "m.log").read_text() == "(raylet) WARNING: pushed\n"
    assert stream.getvalue() == console.getvalue()  # anything else is the console's
