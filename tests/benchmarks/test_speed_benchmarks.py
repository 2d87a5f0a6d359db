"""The side-by-side speed benchmarks, run as a user runs them, at a tiny size: every
variant runs and each line carries its figures (the figures themselves are the scripts' job)."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run(script: str, *args: str, monkeypatch, capsys) -> str:
    monkeypatch.setattr(sys, "argv", [script, *args])
    runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
    return capsys.readouterr().out


def test_graph_feed_times_host_collation_device_gather_and_a_fixed_batch(monkeypatch, capsys, one_thread):
    pytest.importorskip("torch_geometric")
    out = run(
        "graph_feed.py",
        "--rounds",
        "1",
        "--steps",
        "1",
        "--molecules",
        "40",
        "--width",
        "8",
        "--depth",
        "1",
        "--target-dim",
        "4",
        "--threads",
        "0",
        "--corpus",
        "10",
        "--queries",
        "6",
        "--queries-per-step",
        "2",
        monkeypatch=monkeypatch,
        capsys=capsys,
    )
    assert out.count("host collation") == 2 and out.count("building the batch alone") == 2
    for line in out.splitlines():
        if "host / device" in line:
            assert all(float(x) > 0 for x in re.findall(r"([\d.]+)x", line)), line


def test_image_speed_compares_the_switches(monkeypatch, capsys, one_thread):
    out = run(
        "image_speed.py",
        "--width",
        "4",
        "--batch-size",
        "4",
        "--rounds",
        "1",
        "--kinds",
        "clean,pgd10",
        "--variants",
        "fp32/NCHW/eager,bf16/NHWC/eager",
        "--device",
        "cpu",
        monkeypatch=monkeypatch,
        capsys=capsys,
    )
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("fp32/", "bf16/"))]
    assert [r[0] for r in rows] == ["fp32/NCHW/eager", "bf16/NHWC/eager"] * 2
    assert all(float(r[1]) > 0 for r in rows) and rows[0][3] == "1.00x"
