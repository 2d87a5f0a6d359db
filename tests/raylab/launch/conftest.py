"""Fixtures of the Ray Train path tests: experiments of toy's workload with another loop."""

from __future__ import annotations

import pytest

from raylab import workloads
from raylab.workloads import Workload


@pytest.fixture
def toy_with_loop(monkeypatch, tmp_path):
    """``toy_with_loop(loop, name)``: register toy's config with another train loop as
    workload ``name``; return the path of an experiment file that runs it."""

    def register(loop: str, name: str) -> str:
        toy = workloads.get("toy")
        monkeypatch.setitem(
            workloads.registry(), name, Workload(config=toy.config, loop=loop, metrics=toy.metrics, data_parallel=True)
        )
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            f"workload: {name}\nmetric: train/loss\nmode: min\n"
            "config: {steps: 60, report_every: 20}\nsearch: {seed: [0]}\n"
            "checkpoint: {every: 1, keep: 2}\n"
        )
        return str(path)

    return register
