"""DQN with MSE, Huber, L1 and soft-linf inner-loop surrogates, measuring the sup-norm Bellman residual."""

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
)
"""Atari only: the held-out probe (heldout.py)."""

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

METRICS = COMMON_METRICS + HELDOUT_METRICS + EXACT_METRICS + ("train/soft_linf_ess", "bellman/td_error_max_batch")
"""Everything this workload reports (loop.py documents each; soft_linf_ess with loss soft_linf
only); the rllib backend reports a subset and bellman/td_error_max_batch."""
