"""The toy workload through real Ray Tune: metrics, summary, resume, local trials."""

from pathlib import Path

import pytest
from conftest import assert_finite_metrics

from raylab.launch import summary
from raylab.run_folder import TrialFolder


def test_toy_smoke_sweep_reports_metrics(smoke_sweep):
    results, run_path, experiment = smoke_sweep(
        "toy", "search.seed=[0]", "search.variant=[{batch_size: 16}, {batch_size: 64, noise: 0.2}]"
    )
    assert len(results) == 2
    variants = sorted((r.config["variant"]["batch_size"], r.config["variant"].get("noise")) for r in results)
    assert variants == [(16, None), (64, 0.2)]
    for result in results:
        assert result.error is None
        assert_finite_metrics(result.metrics, ["train/loss", "eval/mse", "train/step"])
        assert result.metrics["train/step"] == 60
        assert result.checkpoint is not None
        saved = TrialFolder.at(result.path).config()
        assert saved["steps"] == 60 and saved["dim"] == 8 and saved["seed"] == result.config["seed"]
        for key, value in result.config["variant"].items():  # the variant's values took effect
            assert saved[key] == value
    table = summary.rows(results, experiment.metric, experiment.mode, list(experiment.search))
    assert [row["status"] for row in table] == ["TERMINATED", "TERMINATED"]


def test_local_trial_resumes_and_matches_uninterrupted(local_trial, tmp_path):
    full = local_trial("toy")
    part = local_trial("toy", trial_dir=tmp_path / "resumed", stop={"train/step": 20})
    assert part[-1]["train/step"] == 20
    rest = local_trial("toy", trial_dir=tmp_path / "resumed")
    assert rest[0]["train/step"] == 40  # continued from the step-20 checkpoint
    assert rest[-1]["eval/mse"] == full[-1]["eval/mse"]


@pytest.mark.slow
def test_multi_worker_trial_runs_on_ray_train(smoke_sweep):
    results, run_path, _ = smoke_sweep("toy", "search.seed=[0]", "resources.workers=2")
    (result,) = results
    assert result.error is None, result.error
    assert_finite_metrics(result.metrics, ["train/loss", "eval/mse", "train/step"])
    assert result.metrics["train/step"] == 60
    # The Ray Train run's checkpoints reach the trial folder, as a plain Tune trial's do.
    assert result.checkpoint is not None and Path(result.checkpoint.path).parent == Path(result.path)
    assert (Path(result.checkpoint.path) / "state.pt").is_file()
