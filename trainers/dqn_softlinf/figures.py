"""The dqn_softlinf report: return and sup-norm Bellman residual against env steps, one line per
inner-loop loss (or soft-linf beta), shaded over seeds, a panel per game; final tables per game."""

from raylab.report_spec import Bars, Curve, Report, Table

REPORT = Report(items=(
    Curve(("eval/return_mean", "bellman/residual_linf_heldout", "bellman/residual_linf_expected"),
          x="env/steps", by=("loss", "beta"),
          title="evaluation return and held-out sup-norm Bellman residual (one-sample, K-sample) against env steps"),
    Curve(("episode/return_mean", "inner/regression_linf"), x="env/steps", by=("loss", "beta"),
          title="training-episode return and inner-loop sup-norm regression error"),
    Bars(("bellman/residual_linf_heldout", "bellman/residual_p99_heldout", "bellman/residual_l2_heldout"),
         by=("loss", "beta"), title="held-out Bellman residual at the end: sup norm, 99th percentile, L2"),
    Table("eval/return_mean", rows="game", columns=("loss", "beta"), best="max",
          title="final evaluation return per game (mean ± std over seeds)"),
    Table("bellman/residual_linf_expected", rows="game", columns=("loss", "beta"), best="min",
          title="final held-out sup-norm Bellman residual against K-sample targets per game (mean ± std over seeds)"),
))
