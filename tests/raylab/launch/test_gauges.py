"""The per-trial gauges reach Ray's metrics export (Prometheus text), as the dashboard reads them."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest


def scrape(ray) -> str:
    """Prometheus text of every node's metrics export port."""
    text = ""
    for node in ray.nodes():
        if node["Alive"] and node.get("MetricsExportPort"):
            url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
            try:
                text += urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                pass
    return text


def trial_tags(text: str, series: str) -> set[str]:
    """The trial tags of one raylab series in Prometheus text."""
    return {
        line.split('trial="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith(series) and 'trial="' in line
    }


@pytest.mark.slow
def test_trial_gauges_are_exported_while_the_trial_runs(ray_session, smoke_sweep, tmp_path):
    series = ("ray_raylab_trial_reports_per_s", "ray_raylab_trial_checkpoint_seconds", "ray_raylab_trial_metric")
    before = trial_tags(scrape(ray_session), series[0])  # earlier tests' trials in this Ray
    seen: list[tuple[str, str]] = []
    done = threading.Event()
    # The trial is held after its report at step 100 until its gauges were seen (or 3 minutes).
    release = tmp_path / "release"

    def poll():
        deadline = time.monotonic() + 180
        try:
            while not done.is_set() and time.monotonic() < deadline:
                text = scrape(ray_session)
                new = set.intersection(*(trial_tags(text, name) for name in series)) - before
                if new:
                    seen.append((new.pop(), text))
                    return
                time.sleep(1)
        finally:
            release.touch()

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    results, _, _ = smoke_sweep(
        "toy",
        "search.seed=[0]",
        "config.steps=300",
        "config.hold_at_step=100",
        f"config.release_file={release}",
        "config.report_every=10",
        run_name="gauges",
    )
    done.set()
    poller.join(timeout=10)
    (result,) = results
    assert result.error is None
    assert seen, "the raylab gauges of this trial never appeared in Ray's metrics export"
    trial, text = seen[0]
    assert trial == result.metrics["trial_id"]
    mine = [line for line in text.splitlines() if f'trial="{trial}"' in line]
    assert any('metric="train/loss"' in line for line in mine), mine
    assert any('metric="eval/mse"' in line for line in mine), mine
