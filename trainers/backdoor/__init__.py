"""Backdoor learning as simplicity-biased optimization: ResNet-18 studies (``backdoor``) and the
one-hidden-layer ReLU theory experiment (``backdoor_theory``)."""

GROUPS = ("poison", "target", "relabel", "clean")
"""Probe groups: triggered source-class images with the target label; clean target-class
images; the poisoned group's images without the trigger, relabelled to the target; clean
images of every class with their own labels."""
CONTROLS = ("target", "relabel")
"""The control groups that share the poisoned group's label (and so its class prior)."""
_GROUPED = (
    "loss",
    "loss_drop",
    "rel_drop",
    "grad_coherence",
    "gate_flip_since_last",
    "margin",
    "margin_growth",
    "grad_signal",
    "grad_alignment",
)
_CONTRASTED = ("loss_drop", "grad_coherence", "margin_growth", "gate_flip_since_last", "grad_signal", "grad_alignment")

METRICS = (
    "train/step",
    "train/epoch",
    "train/loss",
    "train/acc",
    "train/lr",
    "perf/images_per_s",
    "perf/autocast_bf16",
    "eval/clean_acc",
    "eval/asr",
    "eval/ra",
    "eval/clean_acc_floor",
    *(f"early/{name}_{group}" for name in _GROUPED for group in GROUPS),
    *(f"early/{name}_gap_vs_{control}" for name in _CONTRASTED for control in CONTROLS),
    *(f"early/loss_drop_prior_corrected_{group}" for group in GROUPS),
    "early/clean_acc",
    "early/asr",
    "early/probe_step",
    "early/loss_drop_prior_corrected_gap_vs_clean",
    "early/loss_drop_gap_vs_clean",
    "neurons/trigger_dominant_count",
    "neurons/selectivity_max",
    "neurons/selectivity_topk_mean",
    "neurons/asr_ablated_topk",
    "neurons/clean_acc_ablated_topk",
    "neurons/asr_ablated_random",
    "finetune/epoch",
    "finetune/step",
    "finetune/lr",
    "finetune/loss",
    "finetune/clean_acc",
    "finetune/asr",
    "finetune/ra",
    "finetune/selectivity_retained",
    "finetune/trigger_dominant_count",
    "finetune/asr_ablated_topk",
)
"""Every metric the backdoor loop reports (the last row of a trial has all of them)."""

THEORY_METRICS = (
    "theory/step",
    *(
        f"theory/{name}_{group}"
        for name in (
            "loss",
            "frozen_loss",
            "gate_flip_since_init",
            "gate_flip_error",
            "gate_drift",
            "drift_error",
            "flip_loss_error",
            "rel_drop",
            "signal",
            "signal_predicted_drop",
            "second_order_predicted_drop",
            "curvature",
            "gate_flip_at_t",
        )
        for group in ("poison", "clean")
    ),
    "theory/loss_drop_ratio",
    "theory/predicted_drop_ratio",
    "theory/frozen_gate_rel_error",
    "theory/signal_ratio",
)
"""Every metric the backdoor_theory loop reports."""
