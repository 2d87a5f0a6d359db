"""DQN with MSE, Huber and soft-linf inner-loop surrogates, measuring the sup-norm Bellman residual."""

METRICS = (
    "eval/return_mean",
    "episode/return_mean",
    "bellman/residual_linf",
    "bellman/residual_p99",
    "bellman/residual_l2",
    "inner/regression_linf",
    "inner/progress_ratio",
    "train/loss",
    "train/q_mean",
    "env/steps",
    "perf/env_steps_per_s",
)
"""What the raylab loop reports (loop.py documents each); the rllib backend reports a subset."""
