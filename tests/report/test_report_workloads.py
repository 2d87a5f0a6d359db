"""The report of one real smoke sweep of each workload: declared figures drawn, tables exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raylab import report, workloads

# One experiment per workload: the cheapest smoke that sweeps the keys its figures use. The
# backdoor smoke trains two ResNet-18s; a quarter of the standard width keeps it to seconds.
EXPERIMENTS = {
    "backdoor_theory": ("backdoor_theory",),
    "backdoor": ("backdoor_resnet", "config.model_width=16"),
    "dqn_softlinf": ("dqn_softlinf_small",),
    "fair_adv": ("fair_adv", "config.data_dir={shared}/fair_adv-data"),
    "boltz_distill": ("boltz_distill",),
    "admet_probe": ("admet_probe",),
    "seagram": ("seagram_baselines",),
}


@pytest.mark.slow
@pytest.mark.parametrize("workload", sorted(EXPERIMENTS))
def test_smoke_sweep_report_has_every_declared_figure_and_exact_tables(workload, shared_smoke_sweep,
                                                                       report_checks):
    if workload in ("admet_probe", "boltz_distill"):
        pytest.skip("the oracle checker does not yet read these sweeps' variant groups "
                    "(their reports are drawn, without this oracle check, in tests/boltz_distill/test_bd_smoke.py)")
    # backdoor_theory's and fair_adv's sweeps are their smoke tests' own (run once per session)
    results, run_path, experiment = shared_smoke_sweep(*EXPERIMENTS[workload])
    assert experiment.workload == workload
    assert all(r.error is None for r in results), [str(r.error)[:300] for r in results if r.error]
    path = Path(report.write_report(run_path))
    content = json.loads((path.parent / "report.json").read_text())
    spec = workloads.get(workload).report_spec()

    assert len(content["figures"]) == len(spec.figures())
    drawn = report_checks.figures(Path(run_path), path.parent, content)
    assert drawn >= 1
    assert report_checks.tables(Path(run_path), content) >= 1
    html = path.read_text()
    assert html.count("<img ") == drawn
    assert not content["failed"]
