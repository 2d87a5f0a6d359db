"""boltz_distill and admet_probe through real Ray Tune (smoke), and exact resume of a trial."""

from __future__ import annotations

import pytest
from conftest import assert_finite_metrics

from raylab.errors import UserError
from trainers.boltz_distill import DISTILL_METRICS, metric_name

PROBE_REPORTED = (metric_name("solubility"), "probe/test/score", "probe/valid/score",
                  "probe/test/mean_predictor", "probe/epoch", "probe/train_loss")


@pytest.mark.slow
def test_distill_smoke_sweep_reports_metrics(smoke_sweep, tmp_path):
    results, _, experiment = smoke_sweep("boltz_distill", f"config.store_root={tmp_path / 'stores'}")
    assert len(results) == 2  # descriptor and conformer teachers
    for result in results:
        assert result.error is None, result.error
        assert_finite_metrics(result.metrics, DISTILL_METRICS)
        assert result.metrics["distill/epoch"] == 2
        assert result.checkpoint is not None
    assert {tuple(r.config["teachers"]) for r in results} == {("descriptors",), ("conformer",)}


@pytest.mark.slow
def test_probe_smoke_sweep_reports_metrics(smoke_sweep):
    results, _, _ = smoke_sweep("admet_probe")
    assert len(results) == 2  # morgan and random_student on solubility
    for result in results:
        assert result.error is None, result.error
        assert_finite_metrics(result.metrics, PROBE_REPORTED)
        assert result.metrics[metric_name("solubility")] > 0


@pytest.mark.slow
def test_distill_trial_resumes_exactly(local_trial, tmp_path):
    stores = f"config.store_root={tmp_path / 'stores'}"
    full = local_trial("boltz_distill", stores, trial_dir=tmp_path / "full")
    part = local_trial("boltz_distill", stores, trial_dir=tmp_path / "resumed", stop={"distill/step": 10})
    assert part[-1]["distill/step"] == 10
    rest = local_trial("boltz_distill", stores, trial_dir=tmp_path / "resumed")
    assert rest[0]["distill/step"] == 15  # continued from the step-10 checkpoint
    assert rest[-1]["distill/step"] == full[-1]["distill/step"]
    assert rest[-1]["distill/val_loss"] == full[-1]["distill/val_loss"]
    assert rest[-1]["distill/loss"] == full[-1]["distill/loss"]

    # the distilled student is probed by admet_probe straight from its trial folder
    rows = local_trial("admet_probe", "config.features=student", "config.probe=linear",
                       f"config.student_checkpoint={tmp_path / 'full'}", trial_dir=tmp_path / "probe")
    assert_finite_metrics(rows[-1], PROBE_REPORTED)
    # a teacher store without the task's molecules is refused with the count and the fix
    with pytest.raises(UserError, match=r"task molecules are not in .*run the teacher command"):
        local_trial("admet_probe", "config.features=teacher", "config.probe=linear",
                    f"config.teacher_store={tmp_path / 'stores' / 'descriptors'}", trial_dir=tmp_path / "t")


@pytest.mark.slow
def test_probe_trial_resumes_exactly(local_trial, tmp_path):
    full = local_trial("admet_probe", trial_dir=tmp_path / "full")
    part = local_trial("admet_probe", trial_dir=tmp_path / "resumed", stop={"probe/epoch": 5})
    assert part[-1]["probe/epoch"] == 5
    rest = local_trial("admet_probe", trial_dir=tmp_path / "resumed")
    assert rest[0]["probe/epoch"] == 10
    assert rest[-1][metric_name("solubility")] == full[-1][metric_name("solubility")]
