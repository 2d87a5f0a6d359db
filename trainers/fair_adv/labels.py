"""What the fair_adv report's axes and legends call each metric and swept key (``Report.labels``);
the metrics' definitions are the workload page's metric table. Accuracies are built from the
evaluation (``eval/``: the eval subset at each epoch, ``best/``, ``final/``...) and the attack."""

ACC = {
    "clean_acc": "Clean accuracy",
    "robust_acc": "Robust accuracy (PGD-20)",
    "cw_acc": "Robust accuracy (CW-inf)",
    "autoattack_acc": "Robust accuracy (AutoAttack)",
}
SHAPES = {"": "", "_worst_class": ", worst class", "_per_class": " per class"}
WHEN = {
    "eval": "",
    "val": " (validation)",
    "best": " (best-validation model)",
    "final": " (best model, final test)",
    "final_last": " (last model, final test)",
}
REGIMES = {"outlier": "outlier", "boundary": "boundary", "safe": "safe"}

LABELS = {
    "method": "Method",
    "base_loss": "Base loss",
    "dataset": "Dataset",
    "train/loss": "Training loss",
    "train/robust_acc": "Training robust accuracy",
    "train/epoch": "Epoch",
    "train/lr": "Learning rate",
    "train/images_per_s": "Training images per second",
    **{f"regime/{r}_frac": f"Fraction of visits in the {w} regime" for r, w in REGIMES.items()},
    **{f"regime/{r}_frac_per_class": f"Fraction of visits in the {w} regime, per class" for r, w in REGIMES.items()},
    "frl/clean_weight_per_class": "FRL clean-loss class weight",
    "frl/bndy_weight_per_class": "FRL boundary-loss class weight",
    "best/epoch": "Best validation epoch",
    "best/val_robust_acc_worst_class": "Worst-class robust accuracy (validation, best epoch)",
    "best/val_robust_acc": "Robust accuracy (validation, best epoch)",
    "best/val_score": "Selection rule's value (validation, best epoch)",
    "best/robust_acc_worst_class_gap": "Worst-class robust accuracy, best minus last",
    "best/robust_acc_gap": "Robust accuracy, best minus last",
    **{
        f"{when}/{acc}{shape}": f"{text}{shape_text}{when_text}"
        for when, when_text in WHEN.items()
        for acc, text in ACC.items()
        for shape, shape_text in SHAPES.items()
        if when in ("final", "final_last") or acc in ("clean_acc", "robust_acc")
    },
    **{
        f"final/{acc}{shape}_gap": f"{text}{shape_text}, best minus last model (final test)"
        for acc, text in ACC.items()
        for shape, shape_text in (("", ""), ("_worst_class", ", worst class"))
    },
}
