"""benchmarks/gpu_throughput.py --smoke, the device check, runs end to end on a CPU: every section,
its table, the JSON and the targets, as it will run on a GPU machine the first time."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_throughput.py"


@pytest.mark.slow  # the benchmark script end to end, its packing workers as processes: 24 s
def test_smoke_runs_every_section_and_writes_its_tables(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "gpu_throughput.json").read_text())
    assert data["smoke"] and data["device"] == "cpu"

    dqn = {r["variant"]: r for r in data["dqn"]}
    assert list(dqn) == ["today", "window", "device", "device+graph", "window NCHW"]
    assert dqn["window NCHW"]["channels_last"] is False and dqn["window"]["channels_last"] is True
    assert all(dqn[n]["host_ms_per_vector_step"] > 0 and dqn[n]["ale_threads"] >= 1 for n in ("today", "window"))
    assert data["finished"] == ["dqn", "ops", "pack", "image", "eval"] and "compile" not in data  # --compile: last
    for name in ("today", "window", "device"):
        assert dqn[name]["steps_per_s"] > 0 and dqn[name]["updates"] == (128 - 32) // 4, dqn[name]
    assert "not measurable on CPU" in dqn["device+graph"]["note"]

    ops = {r["variant"]: r for r in data["ops"]}  # per update, counted where they happen
    assert [ops[n]["h2d_copies_per_update"] for n in ("today", "window", "device")] == [5, 2, 0]
    assert [ops[n]["reads_per_update"] for n in ("today", "window", "device")] == [1, 0, 0]  # today: soft-linf's beta
    assert all(ops[n]["launches_per_update"] > 50 for n in ("today", "window", "device"))
    assert all(ops[n]["ms_per_update"] > 0 for n in ("today", "window", "device"))

    assert [r["processes"] for r in data["pack"]] == [1, 2]  # the device run: 1, 2 and 4
    assert all(r["images_per_s"] > 0 and len(r["per_process"]) == r["processes"] for r in data["pack"])
    image = {(r["variant"], r["step"]): r for r in data["image"]}
    assert len(image) == 4 and all(r["images_per_s"] > 0 for r in image.values())

    evals = {r["variant"]: r for r in data["eval"]}  # the evaluation games, host and device path
    assert list(evals) == ["host", "device"] and all(r["steps_per_s"] > 0 for r in evals.values())
    assert all(r["same_returns"] and r["h2d_copies_per_step"] == r["reads_per_step"] == 1 for r in evals.values())

    targets = {t["target"]: t["status"] for t in data["targets"]}
    assert targets.pop("cpu_no_regression") in ("met", "not met")
    assert set(targets.values()) == {"not measurable on CPU"} and len(targets) == 3
    for heading in (
        "DQN loop, Pong, 8 envs",
        "DQN update, per update",
        "processes at once",
        "DQN evaluation games",
        "targets (predictions):",
    ):
        assert heading in proc.stdout, heading


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_unknown_section_is_one_line_and_exit_2(capsys):
    module = load_script()
    assert module.main(["--sections", "dqn,gpus", "--out", "unused"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpu_throughput: unknown section(s) gpus; valid: dqn, ops, pack, image, eval, compile"]


def test_every_section_is_printed_by_the_one_table_writer():
    """``section_table`` prints each section from its ``TABLES`` entry: the title, one header
    with every column, a line per row (a missing value as '-', a row's note after it), the note."""
    from types import SimpleNamespace

    module = load_script()
    args = SimpleNamespace(rounds=2, sizes=dict(module.SIZES[False]))
    assert set(module.TABLES) == set(module.SECTIONS)
    for section, spec in module.TABLES.items():
        rows = [{"ale_threads": 8, "counted": "ops", "settings": {}}, {"note": "not measurable"}]
        for i, (key, _, fmt) in enumerate(spec.columns):
            rows[0][key] = "x" if fmt == "s" else (i if fmt == "d" else i + 0.5)
        lines = module.section_table(section, {section: rows}, args).splitlines()
        assert lines[0] == spec.title(rows, args, section)
        assert lines[1].split() == " ".join(h for _, h, _ in spec.columns).split()
        assert len(lines[2].split()) == len(spec.columns) and "-" not in lines[2].split()
        assert lines[3].split() == ["-"] * len(spec.columns) + ["not", "measurable"]
        note = spec.note(rows, args)
        assert lines[4:] == ([f"  ({note})"] if note else []), (section, lines[4:])


def test_a_run_killed_after_its_first_section_leaves_that_sections_json(tmp_path):
    """Each section is printed and written as it ends: killed once the first table is printed,
    the JSON holds that section (and says so), nothing of the next."""
    import signal

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--smoke", "--sections", "ops,image", "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("DQN update, per update"):  # the first section's table
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert seen and seen[-1].startswith("DQN update"), seen[-5:]
    data = json.loads((tmp_path / "out" / "gpu_throughput.json").read_text())
    assert data["finished"] == ["ops"] and "image" not in data, data.keys()
    assert {r["variant"] for r in data["ops"]} >= {"today", "window", "device"}
