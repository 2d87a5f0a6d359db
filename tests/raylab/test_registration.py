"""Workloads and experiments come from entry points and folders; data parallelism is declared."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raylab import experiment as experiments
from raylab import workloads
from raylab.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def raylab_tune(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "raylab.tune", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def make_lab_package(root: Path) -> None:
    """A lab's own installed package: a module and a dist-info with one entry point."""
    (root / "lab_workloads").mkdir(parents=True)
    (root / "lab_workloads" / "__init__.py").write_text(
        textwrap.dedent("""
        from raylab.workloads import Workload
        WORKLOAD = Workload(config="trainers.toy.config:Config", loop="trainers.toy.loop:train_loop",
                            metrics=("eval/mse",), description="a lab's regression workload")
    """)
    )
    dist = root / "lab_workloads-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-workloads\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[raylab.workloads]\nlab_regression = lab_workloads:WORKLOAD\n")


def add_lab_experiments(root: Path) -> None:
    """The lab's package ships an experiment folder too, registered in ``raylab.experiments``."""
    (root / "lab_configs").mkdir()
    (root / "lab_configs" / "__init__.py").write_text("")
    (root / "lab_configs" / "lab_shipped.yaml").write_text(
        "workload: lab_regression\nmetric: eval/mse\nmode: min\ndescription: the lab's shipped sweep\n"
    )
    with (root / "lab_workloads-0.1.dist-info" / "entry_points.txt").open("a") as f:
        f.write("[raylab.experiments]\nlab = lab_configs\n")


def test_a_lab_package_adds_a_workload_and_a_folder_adds_experiments(tmp_path):
    make_lab_package(tmp_path / "site")
    add_lab_experiments(tmp_path / "site")
    configs = tmp_path / "lab_configs"
    configs.mkdir()
    (configs / "lab_sweep.yaml").write_text(
        "workload: lab_regression\nmetric: eval/mse\nmode: min\ndescription: the lab's sweep\n"
    )
    done = raylab_tune("--list", "--configs", str(configs), env={"PYTHONPATH": str(tmp_path / "site")})
    assert done.returncode == 0, done.stderr
    assert "lab_regression" in done.stdout and "a lab's regression workload" in done.stdout
    (line,) = [line for line in done.stdout.splitlines() if "lab_sweep" in line]
    assert "lab_regression" in line and f"[{configs}]" in line
    assert "[package tune_configs]" in next(
        line for line in done.stdout.splitlines() if line.strip().startswith("toy ")
    )
    # the lab package's registered folder is searched beside this repository's tune_configs
    assert "[package lab_configs]" in next(line for line in done.stdout.splitlines() if "lab_shipped" in line)
    # RAYLAB_CONFIGS does the same as --configs.
    dry = raylab_tune(
        "lab_sweep", "--dry-run", env={"PYTHONPATH": str(tmp_path / "site"), "RAYLAB_CONFIGS": str(configs)}
    )
    assert dry.returncode == 0, dry.stderr
    assert "workload: lab_regression" in dry.stdout


def test_a_workload_name_registered_twice_is_refused_naming_both_entry_points(tmp_path, monkeypatch):
    site = tmp_path / "site"
    make_lab_package(site)  # lab_regression
    (site / "lab_workloads" / "again.py").write_text(
        "from lab_workloads import WORKLOAD\nWORKLOADS = {'toy': WORKLOAD}\n"
    )
    with (site / "lab_workloads-0.1.dist-info" / "entry_points.txt").open("a") as f:
        f.write("lab_more = lab_workloads.again:WORKLOADS\n")
    monkeypatch.syspath_prepend(str(site))  # installed, as far as importlib.metadata can tell
    workloads.registry.cache_clear()
    try:
        with pytest.raises(UserError) as refused:
            workloads.registry()
    finally:
        monkeypatch.undo()
        workloads.registry.cache_clear()
    message = str(refused.value)
    assert "\n" not in message and "workload 'toy' is registered twice" in message
    assert "'trainers = trainers:WORKLOADS'" in message and "'lab_more = lab_workloads.again:WORKLOADS'" in message
    assert "toy" in workloads.registry() and "lab_regression" not in workloads.registry()


def test_an_experiment_name_two_packages_ship_is_refused_naming_both_unless_configs_picks_one(tmp_path):
    site = tmp_path / "site"
    make_lab_package(site)
    add_lab_experiments(site)
    (site / "lab_configs" / "toy.yaml").write_text(  # the lab's own "toy", beside this repository's
        "workload: lab_regression\nmetric: eval/mse\nmode: min\ndescription: the lab's toy\n"
    )
    env = {"PYTHONPATH": str(site)}
    for args in (["--list"], ["toy", "--dry-run"], ["lab_shipped", "--dry-run"]):
        done = raylab_tune(*args, env=env)
        assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
        assert "experiment 'toy' is shipped by two packages" in done.stderr, done.stderr
        assert "package tune_configs" in done.stderr and "package lab_configs" in done.stderr
        assert "--configs" in done.stderr and "Traceback" not in done.stderr
    # --configs stays the explicit choice: a folder's toy.yaml wins over both packages
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "toy.yaml").write_text((site / "lab_configs" / "toy.yaml").read_text())
    done = raylab_tune("--list", "--configs", str(mine), env=env)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.strip().startswith("toy "))  # the experiment
    assert "lab_regression" in line and f"[{mine}]" in line


def test_missing_configs_folder_is_one_line_exit_2(tmp_path):
    done = raylab_tune("--list", "--configs", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "nowhere" in done.stderr


def test_experiments_ship_inside_the_package():
    from importlib.resources import files

    packaged = Path(str(files("tune_configs")))
    assert (packaged / "toy.yaml").is_file()
    assert experiments.available()["toy"].parent == packaged


def test_workers_above_one_is_refused_for_a_workload_that_is_not_data_parallel():
    assert not workloads.get("seagram").data_parallel
    with pytest.raises(UserError, match=r"resources.workers: 2 .*'seagram' is not data-parallel"):
        experiments.load("seagram", ["resources.workers=2"], smoke=True)
    done = raylab_tune("seagram", "--smoke", "resources.workers=2", "--dry-run")
    assert done.returncode == 2 and "not data-parallel" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.strip().count("\n") == 0


def test_data_parallel_workloads_accept_several_workers():
    for name in ("toy", "backdoor"):
        assert workloads.get(name).data_parallel
    assert experiments.load("toy", ["resources.workers=2"], smoke=True).resources.workers == 2
