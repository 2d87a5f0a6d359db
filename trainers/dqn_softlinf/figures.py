"""The dqn_softlinf report: return and sup-norm Bellman residual (held-out and K-sample on Atari,
exact on known-model envs) against env steps, one line per inner-loop loss (or soft-linf beta),
shaded over seeds, a panel per game; final tables per game. A figure whose metrics a suite does
not report is listed as not drawn."""

from raylab.report.spec import Bars, Curve, Only, Report, Table
from trainers.dqn_softlinf import EXACT_METRICS, HELDOUT_METRICS

# Which runs report what (loop.py): the exact quantities where the env's model is known (the
# FeatureMDP), the held-out probe on Atari with the raylab backend and a held-out set.
ONLY = (
    Only(EXACT_METRICS, lambda c: str(c.get("game", "")).startswith("raylab/FeatureMDP"),
         "known-model environments (FeatureMDP)"),
    Only(HELDOUT_METRICS, lambda c: c.get("suite", "atari") == "atari" and c.get("backend", "raylab") == "raylab"
         and c.get("heldout_size", 1) > 0, "Atari (raylab backend, heldout_size > 0)"),
    Only("train/soft_linf_ess", lambda c: c.get("loss") == "soft_linf", "loss soft_linf"),
    Only("bellman/td_error_max_batch", lambda c: c.get("backend") == "rllib", "backend rllib"),
)

REPORT = Report(only=ONLY, items=(
    Curve(("eval/return_mean", "bellman/residual_linf_heldout", "bellman/residual_linf_expected"),
          x="env/steps", by=("loss", "beta"),
          title="evaluation return and held-out sup-norm Bellman residual (one-sample, K-sample) against env steps"),
    Curve(("bellman/residual_linf_exact", "bellman/qstar_dist_linf", "bellman/greedy_value_gap_exact",
           "inner/progress_ratio_exact"), x="env/steps", by=("loss", "beta"),
          title="exact quantities where the model is known (FeatureMDP): sup-norm residual, distance to Q*, "
                "greedy policy's value gap, inner-loop progress"),
    Curve(("episode/return_mean", "inner/regression_linf"), x="env/steps", by=("loss", "beta"),
          title="training-episode return and inner-loop sup-norm regression error"),
    Bars(("bellman/residual_linf_heldout", "bellman/residual_p99_heldout", "bellman/residual_l2_heldout"),
         by=("loss", "beta"), title="held-out Bellman residual at the end: sup norm, 99th percentile, L2"),
    Table("eval/return_mean", rows="game", columns=("loss", "beta"), best="max",
          title="final evaluation return per game (mean ± std over seeds)"),
    Table("bellman/residual_linf_exact", rows="game", columns=("loss", "beta"), best="min",
          title="final exact sup-norm Bellman residual (known-model envs; mean ± std over seeds)"),
    Table("bellman/residual_linf_expected", rows="game", columns=("loss", "beta"), best="min",
          title="final held-out sup-norm Bellman residual against K-sample targets per game (mean ± std over seeds)"),
))
