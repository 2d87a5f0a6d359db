"""What the backdoor reports' axes and legends call each metric and swept key (``Report.labels``).

The early-stage metrics are built from the group names and quantities below (docs/workloads/backdoor.md, "Metrics"):
``early/loss_drop_gap_vs_relabel`` reads "early loss drop: poisoned − relabelled control"."""

GROUPS = {
    "poison": "poisoned images",
    "target": "clean target-class images",
    "relabel": "relabelled control",
    "clean": "clean images",
}
EARLY = {
    "loss": "Early loss (nats)",
    "loss_drop": "Early loss drop (nats)",
    "rel_drop": "Early relative loss drop",
    "grad_coherence": "Early gradient coherence",
    "gate_flip_since_last": "Early gate flips since last report",
    "margin": "Early logit margin",
    "margin_growth": "Early margin growth",
    "loss_drop_prior_corrected": "Early prior-corrected loss drop (nats)",
    "grad_signal": "Early signal <grad L_group, grad L>",
    "grad_alignment": "Early cosine of grad L_group and grad L",
}
CONTROLS = {"relabel": "relabelled control", "target": "clean target-class images", "clean": "clean images"}

LABELS = {
    "attack": "Attack",
    "poison_mode": "Poisoning mode (trigger, or label flip only)",
    "early/clean_acc": "Clean accuracy at the early probe",
    "early/asr": "Attack success rate at the early probe",
    "early/probe_step": "Step of the early probe these values come from",
    "poison_ratio": "Poisoning ratio",
    "train/step": "SGD step",
    "train/epoch": "Epoch",
    "train/loss": "Training loss",
    "train/acc": "Training accuracy",
    "train/lr": "Learning rate",
    "perf/images_per_s": "Images per second",
    "perf/autocast_bf16": "Training forward ran in bfloat16 (1) or float32 (0)",
    "eval/clean_acc": "Clean accuracy",
    "eval/asr": "Attack success rate",
    "eval/clean_acc_floor": "Clean-accuracy floor for ASR",
    "eval/ra": "Robust accuracy (triggered, true class)",
    **{f"early/{q}_{g}": f"{text}: {GROUPS[g]}" for q, text in EARLY.items() for g in GROUPS},
    **{
        f"early/{q}_gap_vs_{c}": f"{EARLY[q]}: poisoned − {CONTROLS[c]}"
        for q in (
            "loss_drop",
            "grad_coherence",
            "margin_growth",
            "gate_flip_since_last",
            "grad_signal",
            "grad_alignment",
        )
        for c in ("relabel", "target")
    },
    "early/loss_drop_gap_vs_clean": f"{EARLY['loss_drop']}: poisoned − clean images",
    "early/loss_drop_prior_corrected_gap_vs_clean": f"{EARLY['loss_drop_prior_corrected']}: poisoned − clean images",
    "neurons/trigger_dominant_count": "Trigger-dominant neurons",
    "neurons/selectivity_max": "Largest neuron selectivity",
    "neurons/selectivity_topk_mean": "Mean selectivity of the top-k neurons",
    "neurons/asr_ablated_topk": "Attack success rate, top-k neurons ablated",
    "neurons/clean_acc_ablated_topk": "Clean accuracy, top-k neurons ablated",
    "neurons/asr_ablated_random": "Attack success rate, random neurons ablated",
    "finetune/epoch": "Fine-tuning epoch",
    "finetune/step": "Fine-tuning step",
    "finetune/lr": "Fine-tuning learning rate",
    "finetune/loss": "Fine-tuning loss",
    "finetune/clean_acc": "Clean accuracy after fine-tuning",
    "finetune/asr": "Attack success rate after fine-tuning",
    "finetune/ra": "Robust accuracy after fine-tuning",
    "finetune/selectivity_retained": "Selectivity retained after fine-tuning",
    "finetune/trigger_dominant_count": "Trigger-dominant neurons after fine-tuning",
    "finetune/asr_ablated_topk": "Attack success rate after fine-tuning, top-k ablated",
}

THEORY_GROUPS = {"poison": "poisoned", "clean": "clean"}
THEORY_LABELS = {
    "poison_ratio": "Poisoning ratio",
    "theory/step": "SGD step",
    **{f"theory/loss_{g}": f"Loss, {w} group (ReLU net)" for g, w in THEORY_GROUPS.items()},
    **{f"theory/frozen_loss_{g}": f"Loss, {w} group (frozen gates)" for g, w in THEORY_GROUPS.items()},
    **{f"theory/gate_flip_since_init_{g}": f"Gates flipped since init, {w}" for g, w in THEORY_GROUPS.items()},
    **{f"theory/gate_flip_error_{g}": f"Frozen-gate error, {w}" for g, w in THEORY_GROUPS.items()},
    **{f"theory/gate_drift_{g}": f"Gate drift, {w}" for g, w in THEORY_GROUPS.items()},
    **{f"theory/drift_error_{g}": f"Loss error from weight drift, {w}" for g, w in THEORY_GROUPS.items()},
    **{f"theory/flip_loss_error_{g}": f"Loss error from gate flips, {w}" for g, w in THEORY_GROUPS.items()},
    **{f"theory/rel_drop_{g}": f"Relative loss drop, {w}" for g, w in THEORY_GROUPS.items()},
    **{f"theory/signal_{g}": f"Frozen-gate signal, {w}" for g, w in THEORY_GROUPS.items()},
    **{f"theory/signal_predicted_drop_{g}": f"First-order predicted drop, {w}" for g, w in THEORY_GROUPS.items()},
    **{
        f"theory/second_order_predicted_drop_{g}": f"Second-order predicted drop, {w}" for g, w in THEORY_GROUPS.items()
    },
    **{f"theory/curvature_{g}": f"Second derivative of the group loss at init, {w}" for g, w in THEORY_GROUPS.items()},
    **{f"theory/gate_flip_at_t_{g}": f"Gates flipped at T, {w}" for g, w in THEORY_GROUPS.items()},
    "theory/loss_drop_ratio": "Early loss-drop ratio, poisoned / clean (measured)",
    "theory/predicted_drop_ratio": "Early loss-drop ratio, poisoned / clean (frozen-gate prediction)",
    "theory/frozen_gate_rel_error": "Frozen-gate relative error",
    "theory/signal_ratio": "Signal ratio, poisoned / clean",
}
