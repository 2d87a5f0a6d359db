"""The Atari smoke sweep through real Ray Tune, and stopped trials resuming from checkpoints."""

import pytest
from conftest import assert_finite_metrics

from raylab.run_folder import TrialFolder
from trainers.dqn_softlinf import COMMON_METRICS, EXACT_METRICS, HELDOUT_METRICS, SHARED_METRICS


@pytest.mark.slow
def test_atari_smoke_sweep_reports_every_metric(smoke_sweep):
    results, run_path, experiment = smoke_sweep("dqn_softlinf")
    assert len(results) == 2  # mse and soft_linf on Pong
    time_averaged = [
        m + "_last_half_mean"
        for m in (
            "bellman/residual_linf_heldout",
            "bellman/residual_linf_expected",
            "bellman/residual_linf_shared_debiased",
        )
    ]
    for result in results:
        assert result.error is None, result.error
        assert_finite_metrics(result.metrics, COMMON_METRICS + HELDOUT_METRICS + SHARED_METRICS + tuple(time_averaged))
        assert result.metrics["bellman/heldout_transitions"] >= 200  # held-out ring of 256, filled
        assert result.metrics["env/steps"] == 2000 and result.metrics["env/frames"] == 8000
        assert result.checkpoint is not None
    losses = sorted(r.config["variant"]["loss"] for r in results)
    assert losses == ["mse", "soft_linf"]
    # both arms scored their networks on the same shared states (and not on the same network)
    assert results[0].metrics["bellman/shared_set_id"] == results[1].metrics["bellman/shared_set_id"]
    assert results[0].metrics["bellman/residual_linf_shared"] != results[1].metrics["bellman/residual_linf_shared"]


@pytest.mark.slow
def test_atari_trial_resumes_and_continues_its_step_count(local_trial, tmp_path):
    overrides = ["config.loss=soft_linf", "config.total_steps=1500", "stop.env/steps=1500"]
    part = local_trial("dqn_softlinf", *overrides, trial_dir=tmp_path / "t", stop={"env/steps": 1000})
    assert [r["env/steps"] for r in part] == [500, 1000]
    updates_at_stop = part[-1]["train/updates"]
    rest = local_trial("dqn_softlinf", *overrides, trial_dir=tmp_path / "t")
    assert [r["env/steps"] for r in rest] == [1500]  # continued from the step-1000 checkpoint
    assert rest[-1]["train/updates"] == updates_at_stop + 500 // 4  # replay restored: learning goes on
    assert_finite_metrics(
        rest[-1], [m for m in COMMON_METRICS + HELDOUT_METRICS + SHARED_METRICS if m != "episode/return_mean"]
    )
    # the time average runs on across the resume (reports 1,000 and 1,500 of three) ...
    key = "bellman/residual_linf_heldout"
    assert rest[-1][key + "_last_half_mean"] == pytest.approx((part[-1][key] + rest[-1][key]) / 2)
    # ... and the resumed trial rebuilt the same shared set
    assert rest[-1]["bellman/shared_set_id"] == part[-1]["bellman/shared_set_id"]


def test_small_env_resume_is_exact(local_trial, tmp_path):
    """On gymnasium envs the whole state is saved: a resumed trial equals the uninterrupted one."""
    full = local_trial("dqn_softlinf_small", trial_dir=tmp_path / "full")
    part = local_trial("dqn_softlinf_small", trial_dir=tmp_path / "resumed", stop={"env/steps": 1000})
    assert part[-1]["env/steps"] == 1000
    rest = local_trial("dqn_softlinf_small", trial_dir=tmp_path / "resumed")
    assert [r["env/steps"] for r in rest] == [1252, 1500, 1752, 2000]  # reports at vector steps of 4 envs
    assert_finite_metrics(rest[-1], EXACT_METRICS + ("bellman/residual_linf_exact_last_half_mean",))

    def timeless(row):
        return {
            k: v
            for k, v in row.items()
            if not k.startswith("perf/") and k not in {"time_total_s", "training_iteration"}
        }

    assert timeless(rest[-1]) == timeless(full[-1])


def test_in_sample_probe_size_does_not_change_training(local_trial, tmp_path):
    """The probes draw with their own generator: training is the same whatever they measure."""
    rows = {
        size: local_trial(
            "dqn_softlinf_small",
            f"config.probe_size={size}",
            "config.total_steps=1000",
            "stop.env/steps=1000",
            trial_dir=tmp_path / str(size),
        )[-1]
        for size in (64, 1024)
    }
    for key in ("train/loss", "train/q_mean", "bellman/residual_linf_exact", "eval/return_mean"):
        assert rows[64][key] == rows[1024][key], key


def test_resume_without_replay_in_checkpoint_refills(local_trial, tmp_path):
    off = ["config.checkpoint_replay=false"]
    local_trial("dqn_softlinf_small", *off, trial_dir=tmp_path / "r", stop={"env/steps": 1000})
    checkpoint = TrialFolder.at(tmp_path / "r").checkpoint_paths()[0]
    from raylab.checkpoint import load

    assert load(checkpoint).get("replay") is None  # not saved
    rest = local_trial("dqn_softlinf_small", *off, trial_dir=tmp_path / "r")
    # 1000 more steps, of which learning_starts (500) refill the replay before updates resume
    assert rest[-1]["env/steps"] == 2000
    assert (
        rest[-1]["train/updates"] < local_trial("dqn_softlinf_small", trial_dir=tmp_path / "full")[-1]["train/updates"]
    )
