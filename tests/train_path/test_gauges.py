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


@pytest.mark.slow
def test_trial_gauges_are_exported_while_the_trial_runs(ray_session, smoke_sweep):
    seen: list[str] = []
    done = threading.Event()

    def poll():
        while not done.is_set():
            text = scrape(ray_session)
            if "ray_raylab_trial_checkpoint_seconds" in text and 'metric="eval/mse"' in text:
                seen.append(text)
                return
            time.sleep(1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    results, _, _ = smoke_sweep("toy", "search.seed=[0]", "config.steps=300", "config.step_time_s=0.1",
                                "config.report_every=10", run_name="gauges")
    done.set()
    poller.join(timeout=10)
    (result,) = results
    assert result.error is None
    assert seen, "the raylab gauges never appeared in Ray's metrics export"
    lines = [line for line in seen[0].splitlines() if line.startswith("ray_raylab_trial_")]
    trial = result.metrics["trial_id"]
    assert any(f'trial="{trial}"' in line and line.startswith("ray_raylab_trial_reports_per_s")
               for line in lines), lines
    assert any('metric="train/loss"' in line for line in lines), lines
