"""Reports of the backdoor workloads: early-stage signatures of the poisoned and clean groups,
attack success and clean accuracy against the poisoning ratio, trigger-dominant neurons before and
after clean fine-tuning (``REPORT``); frozen-gate predictions against measured early loss
decrease (``THEORY_REPORT``)."""

from raylab.report_spec import Bars, Curve, Report, Scatter, Table, Versus

REPORT = Report(items=(
    Curve(("early/loss_poison", "early/loss_clean"), x="train/step", together=True, skip_repeats=True,
          title="early training loss of the poisoned and the clean group against steps"),
    Curve(("early/grad_coherence_poison", "early/grad_coherence_clean"), x="train/step", together=True,
          skip_repeats=True, title="early gradient coherence of the poisoned and the clean group"),
    Versus("poison_ratio", ("eval/asr", "eval/clean_acc"), by=("attack",),
           title="attack success rate and clean accuracy against the poisoning ratio"),
    Bars(("neurons/trigger_dominant_count", "finetune/trigger_dominant_count"),
         title="trigger-dominant neurons before and after clean fine-tuning"),
    Bars(("eval/asr", "neurons/asr_ablated_topk", "neurons/asr_ablated_random", "finetune/asr",
          "finetune/asr_ablated_topk"),
         title="ASR: trained, top-k neurons ablated, random ablated, fine-tuned, fine-tuned and ablated"),
    Table(("eval/asr", "eval/clean_acc", "early/rel_drop_ratio", "neurons/selectivity_topk_mean",
           "finetune/asr", "finetune/selectivity_retained"),
          title="final attack success, clean accuracy, early drop ratio and neuron selectivity"),
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
           "theory/signal_ratio", "theory/gate_flip_at_t_poison", "theory/gate_flip_at_t_clean"),
          title="at the early time T: measured and predicted drop ratios, frozen-gate error, gate flips"),
))
