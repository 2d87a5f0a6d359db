"""Reports of the backdoor workloads: early-stage signatures of the poisoned group against its
same-label controls, attack success and clean accuracy against the poisoning ratio, trigger-dominant neurons before and
after clean fine-tuning (``REPORT``); frozen-gate predictions against measured early loss
decrease (``THEORY_REPORT``)."""

from raylab.report.spec import Bars, Curve, Report, Scatter, Table, Versus

# At 0% nothing is triggered, so BadNets and Blended train one model: an experiment sweeps that
# clean arm once, as badnets (backdoor_resnet), and it is every such attack's 0% point. WaNet
# trains with its own augmentation and schedule, so its clean arm is its own.
CLEAN_ARM = {"poison_ratio": 0.0, "attack": "badnets"}

REPORT = Report(items=(
    Curve(("early/loss_poison", "early/loss_relabel", "early/loss_target", "early/loss_clean"),
          x="train/step", together=True, skip_repeats=True,
          title="early training loss of the poisoned group and its controls against steps"),
    Curve(("early/grad_coherence_gap_vs_relabel", "early/grad_coherence_gap_vs_target",
           "early/loss_drop_gap_vs_relabel", "early/loss_drop_gap_vs_target",
           "early/gate_flip_since_last_gap_vs_relabel", "early/loss_drop_prior_corrected_gap_vs_clean"),
          x="train/step", skip_repeats=True,
          title="early contrasts: poisoned minus the same-label controls (coherence, loss drop, gate "
                "flips), and minus clean images on the prior-corrected loss"),
    Versus("poison_ratio", ("eval/asr", "eval/clean_acc"), by=("attack",), baseline=CLEAN_ARM,
           title="attack success rate and clean accuracy against the poisoning ratio (0: the clean arm)"),
    Versus("poison_ratio", ("neurons/trigger_dominant_count",), by=("attack",), baseline=CLEAN_ARM,
           title="trigger-dominant neurons against the poisoning ratio (0: a clean model on triggered inputs)"),
    Bars(("neurons/trigger_dominant_count", "finetune/trigger_dominant_count"),
         title="trigger-dominant neurons before and after clean fine-tuning"),
    Bars(("eval/asr", "neurons/asr_ablated_topk", "neurons/asr_ablated_random", "finetune/asr",
          "finetune/asr_ablated_topk"),
         title="ASR: trained, top-k neurons ablated, random ablated, fine-tuned, fine-tuned and ablated"),
    Table(("eval/asr", "eval/clean_acc", "neurons/trigger_dominant_count",
           "early/grad_coherence_gap_vs_relabel", "early/loss_drop_gap_vs_relabel",
           "early/margin_growth_gap_vs_relabel", "early/gate_flip_since_last_gap_vs_relabel",
           "early/loss_drop_prior_corrected_gap_vs_clean", "finetune/asr",
           "finetune/selectivity_retained"),
          title="final attack success, clean accuracy, trigger-dominant neurons (poison_ratio 0: the "
                "clean baseline), early contrasts against the relabelled control (loss drop, "
                "coherence, margin, gating stability) and the prior-corrected one against clean "
                "images, fine-tuning"),
))

THEORY_REPORT = Report(items=(
    Curve(("theory/loss_poison", "theory/loss_clean", "theory/frozen_loss_poison",
           "theory/frozen_loss_clean"), x="theory/step", together=True,
          title="group losses of the ReLU net and of its frozen-gate model against SGD steps"),
    Scatter("theory/predicted_drop_ratio", "theory/loss_drop_ratio", diagonal=True,
            title="measured poisoned/clean early loss-drop ratio against the frozen-gate prediction"),
    Versus("poison_ratio", ("theory/loss_drop_ratio", "theory/predicted_drop_ratio"), together=True,
           title="early loss-drop ratio (measured, frozen-gate predicted) against the poisoning ratio"),
    Table(("theory/loss_drop_ratio", "theory/predicted_drop_ratio", "theory/frozen_gate_rel_error",
           "theory/signal_ratio", "theory/gate_flip_at_t_poison", "theory/gate_flip_at_t_clean",
           "theory/gate_flip_error_poison", "theory/gate_flip_error_clean",
           "theory/drift_error_poison", "theory/flip_loss_error_poison",
           "theory/drift_error_clean", "theory/flip_loss_error_clean"),
          title="at the early time T: measured and predicted drop ratios, frozen-gate error, gate flips; "
                "frozen-gate error terms at the last step (loss error = drift + flip)"),
))
