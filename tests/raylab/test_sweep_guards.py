"""Mistakes that used to run a sweep silently wrong, or end it with a traceback, typed as a
user types them: each is refused (or reported) in one line with its exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tune_configs" / "toy.yaml"


def command(*argv: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120):
    """``python -m raylab.tune ...`` (or another module) as a user runs it."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    module = argv[0] if argv[0].startswith("raylab.") else "raylab.tune"
    args = argv[1:] if argv[0].startswith("raylab.") else argv
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=environ,
        timeout=timeout,
    )


def one_error_line(done, code: int = 2) -> str:
    """The single ``error:`` line of a refused command, with no traceback."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def test_a_key_written_twice_is_refused_with_file_line_and_key(tmp_path):
    text = TOY.read_text().replace("  report_every: 20\n", "  report_every: 20\n  steps: 40\n")
    path = tmp_path / "toy_copy.yaml"
    path.write_text(text)
    line = one_error_line(command(str(path), "--dry-run"))
    number = text.splitlines().index("  steps: 40") + 1
    assert f"{path}:{number}:" in line and "'steps'" in line and "twice" in line


@pytest.mark.parametrize(
    "override",
    [
        "config.lr=.inf",
        "config.lr=-.inf",
        "config.lr=.nan",
        "search.lr=[0.1, .nan]",
        "search.lr={uniform: [0.1, .inf]}",
    ],
)
def test_a_non_finite_config_or_search_value_is_refused(override):
    line = one_error_line(command("toy", "--smoke", override, "--dry-run"))
    assert "config.lr: expected a finite number" in line
