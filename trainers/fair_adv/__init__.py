"""fair_adv: fair adversarial training (PGD-AT, TRADES, FRL, tri-regime reweighting) on CIFAR."""

METRICS = (
    "train/loss", "train/robust_acc", "train/epoch", "train/lr", "train/images_per_s",
    "regime/outlier_frac", "regime/boundary_frac", "regime/safe_frac",
    "regime/outlier_frac_per_class", "regime/boundary_frac_per_class", "regime/safe_frac_per_class",
    "frl/clean_weight_per_class", "frl/bndy_weight_per_class",
    "eval/clean_acc", "eval/clean_acc_worst_class", "eval/clean_acc_per_class",
    "eval/robust_acc", "eval/robust_acc_worst_class", "eval/robust_acc_per_class",
    "val/clean_acc", "val/clean_acc_worst_class", "val/clean_acc_per_class",
    "val/robust_acc", "val/robust_acc_worst_class", "val/robust_acc_per_class",
    "best/epoch", "best/val_robust_acc_worst_class",
    "best/clean_acc", "best/clean_acc_worst_class", "best/robust_acc", "best/robust_acc_worst_class",
    "best/robust_acc_worst_class_gap", "best/robust_acc_gap",
    "final/clean_acc", "final/clean_acc_worst_class", "final/clean_acc_per_class",
    "final/robust_acc", "final/robust_acc_worst_class", "final/robust_acc_per_class",
    "final/cw_acc", "final/cw_acc_worst_class", "final/cw_acc_per_class",
    "final/autoattack_acc", "final/autoattack_acc_worst_class", "final/autoattack_acc_per_class",
)
"""Every metric the loop reports (``final/*`` once, at the end; ``final/autoattack_*`` unless
``autoattack: off``)."""

LAST_METRICS = (
    "final_last/clean_acc", "final_last/clean_acc_worst_class", "final_last/clean_acc_per_class",
    "final_last/robust_acc", "final_last/robust_acc_worst_class", "final_last/robust_acc_per_class",
    "final_last/cw_acc", "final_last/cw_acc_worst_class", "final_last/cw_acc_per_class",
    "final_last/autoattack_acc", "final_last/autoattack_acc_worst_class",
    "final_last/autoattack_acc_per_class",
    "final/clean_acc_gap", "final/clean_acc_worst_class_gap", "final/robust_acc_gap",
    "final/robust_acc_worst_class_gap", "final/cw_acc_gap",
    "final/cw_acc_worst_class_gap", "final/autoattack_acc_gap", "final/autoattack_acc_worst_class_gap",
)
"""Reported too with ``final_eval_last: true``: the last model's final evaluation and the
best-minus-last gaps (``final_last/autoattack_*`` and its gaps unless ``autoattack: off``)."""
