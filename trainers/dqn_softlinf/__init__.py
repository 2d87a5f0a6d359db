"""DQN with MSE, Huber, L1 and soft-linf inner-loop surrogates, measuring the sup-norm Bellman residual."""

from trainers.dqn_softlinf.stats import TIME_AVERAGED, time_averaged_name

COMMON_METRICS = (
    "eval/return_mean",
    "episode/return_mean",
    "bellman/residual_linf_insample",
    "bellman/residual_p99_insample",
    "bellman/residual_l2_insample",
    "inner/regression_linf",
    "inner/progress_ratio",
    "train/loss",
    "train/q_mean",
    "env/steps",
    "perf/env_steps_per_s",
    "perf/probe_s",
    "perf/cuda_graph",
)
"""What the raylab loop reports on every environment."""

HELDOUT_METRICS = (
    "bellman/residual_linf_heldout",
    "bellman/residual_p99_heldout",
    "bellman/residual_l2_heldout",
    "bellman/heldout_transitions",
    "bellman/residual_linf_expected",
    "bellman/residual_linf_sampled_subset",
    "bellman/target_std_expected",
    "bellman/residual_linf_expected_debiased",
    "bellman/residual_linf_expected_bias_bound",
    "bellman/residual_l2_expected_debiased",
)
"""Atari only: the held-out probe (heldout.py)."""

SHARED_METRICS = (
    "bellman/residual_linf_shared",
    "bellman/residual_linf_shared_debiased",
    "bellman/residual_linf_shared_bias_bound",
    "bellman/residual_l2_shared_debiased",
    "bellman/target_std_shared",
    "bellman/shared_set_id",
)
"""Atari only (shared_states > 0): the state set every trial of a sweep shares (shared_states.py);
the worst-case comparison between arms reads ``bellman/residual_linf_shared_debiased`` (and its
time average), checking that ``bellman/shared_set_id`` is equal across the arms."""

EXACT_METRICS = (
    "bellman/residual_linf_exact",
    "bellman/residual_l2_exact",
    "bellman/qstar_dist_linf",
    "bellman/greedy_value_exact",
    "bellman/greedy_value_gap_exact",
    "inner/regression_linf_exact",
    "inner/progress_ratio_exact",
)
"""Environments with a known model (FeatureMDP) only (exact.py)."""

TIME_AVERAGED_METRICS = tuple(time_averaged_name(m) for m in TIME_AVERAGED)
"""Each trial's time average (the mean over the last half of its reports, stats.py) of the
figures the claims compare; reported beside each figure once it is measured."""

FRAME_MARK_METRICS = ("episode/return_mean_at_10M_frames", "episode/return_mean_at_50M_frames")
"""The sticky arm's frame marks (Machado et al.'s budgets); other ``frame_marks`` name their own."""

METRICS = (
    COMMON_METRICS
    + HELDOUT_METRICS
    + SHARED_METRICS
    + EXACT_METRICS
    + TIME_AVERAGED_METRICS
    + FRAME_MARK_METRICS
    + ("env/frames", "train/soft_linf_ess", "bellman/td_error_max_batch", "perf/autocast_bf16")
)
"""What this workload declares (loop.py documents each; soft_linf_ess with loss soft_linf
only; which runs report which is figures.py's ``ONLY``); the rllib backend reports a subset and
bellman/td_error_max_batch."""
