"""Workload seagram: neural subgraph matching victims and solver-efficient adversarial attacks."""

FINAL_METRICS = (
    "attack/map",
    "attack/map_drop",
    "attack/map_true_labels",
    "attack/label_preserved",
    "attack/label_preserved_pos",
    "attack/label_preserved_neg",
    "attack/label_unknown",
    "attack/flips_mean",
    "attack/perturbed_frac",
    "attack/solver_calls_labels",
    "attack/solver_calls_train",
    "attack/solver_calls_test",
    "attack/solver_unknown_test",
    "attack/solver_s_train",
    "attack/solver_s_test",
    "attack/train_s",
    "attack/test_s",
    "attack/pairs",
    "attack/label_check_calls",
    "victim/map",
    "victim/pairs_per_s",
    "seagram/labeled",
    "data/pos_rate",
    "data/pos_rate_test",
    "data/solver_calls",
    "data/queries_dropped_unknown",
    "train/phase",
)
"""Metrics of the final report (every trial ends with one row holding all of them)."""

METRICS = FINAL_METRICS + (
    "victim/loss",
    "victim/step",
    "victim/best_step",
    "attack/pred_label_acc",
    "victim/map_val",
    "seagram/al_round",
    "seagram/noncritical_rate",
    "seagram/clf_loss",
    "attack/solver_unknown_train",
)
"""Every metric the loop reports (the victim and active-learning rows report the rest)."""
