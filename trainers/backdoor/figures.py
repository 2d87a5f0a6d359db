"""Reports of the backdoor workloads: early-stage signatures of the poisoned group against its
same-label controls, attack success and clean accuracy against the poisoning ratio, trigger-dominant neurons before and
after clean fine-tuning (``REPORT``); frozen-gate predictions against measured early loss
decrease (``THEORY_REPORT``)."""

from raylab.report.claims import Before, Claim, Contrast, Control, Value, where
from raylab.report.spec import Bars, Curve, Report, Scatter, Table, Versus, Withheld
from trainers.backdoor.labels import LABELS, THEORY_LABELS

# At 0% nothing is triggered, so BadNets and Blended train one model: an experiment sweeps that
# clean arm once, as badnets (backdoor_resnet), and it is every such attack's 0% point. WaNet
# trains with its own augmentation and schedule, so its clean arm is its own.
CLEAN_ARM = {"poison_ratio": 0.0, "attack": "badnets"}

TRIGGERED = where("trigger", lambda mode: mode in (None, "trigger"))
"""``poison_mode: trigger`` (the default: runs that do not sweep it)."""
POISONED = {"poison_ratio": where("> 0", lambda p: p > 0), "poison_mode": TRIGGERED}
LABEL_FLIP = {"poison_ratio": where("> 0", lambda p: p > 0), "poison_mode": "label_flip"}
"""The label-flip-only arm: the poisoned images relabelled, never triggered."""
CLEAN = {"poison_ratio": 0.0}
BY_ATTACK = ("attack", "poison_ratio")

# The control under every ASR: the network has learned the task. A model at chance that predicts
# the target class everywhere has ASR 1 without a backdoor, so the loop withholds ASR (NaN) where
# clean accuracy does not exceed eval/clean_acc_floor (Config.clean_acc_floor_x_chance x chance).
TASK_LEARNED = Control(
    "the task is learned: clean accuracy above the ASR floor (clean_acc_floor_x_chance x chance) in every trial",
    Contrast("eval/clean_acc", against_metric="eval/clean_acc_floor"),
    expect=">",
    threshold=0.0,
)
ASR_WITHHELD = Withheld(
    "eval/asr",
    lambda row: (
        f"clean accuracy {row.get('eval/clean_acc', float('nan')):.3f} is not above the floor "
        f"{row.get('eval/clean_acc_floor', float('nan')):.3f} (clean_acc_floor_x_chance x chance): "
        "a model at chance has no backdoor to measure"
    ),
)

SATURATED = 0.5
"""The attack success from which the backdoor counts as learned: the early claim is read before it."""

# The positive control of every claim (tests/trainers/backdoor/test_backdoor_science.py): the trigger is
# learned where it was planted and only there. The clean-arm half applies to the claims that
# compare with the clean arm.
LEARNED = Control(
    "the backdoor is learned: attack success of at least 0.5 (where the early claim counts it learned) in every "
    "poisoned trial",
    Value("eval/asr", arm=POISONED),
    expect=">",
    threshold=SATURATED,
)
ABSENT = Control(
    "no backdoor without poison: attack success of at most 0.2 in every clean-arm trial",
    Value("eval/asr", arm=CLEAN),
    expect="<",
    threshold=0.2,
)


def _against_label_flip(metric: str) -> Contrast:
    """The trigger arm's value minus the label-flip arm's, same attack, ratio and seed: relabelling,
    the class prior and the images are the same in both; only the trigger differs."""
    return Contrast(metric, arm=POISONED, against=LABEL_FLIP, strata=BY_ATTACK, pair_on=BY_ATTACK)


def _against_clean(metric: str) -> Contrast:
    """The poisoned arm's value minus the clean arm's, same attack (BadNets' clean arm standing
    for Blended's) and seed."""
    return Contrast(
        metric, arm=POISONED, against=CLEAN, strata=BY_ATTACK, pair_on=("attack",), baseline={"attack": "badnets"}
    )


CLAIMS = (
    Claim(
        "The trigger plants a backdoor: triggered test images go to the target class more often in a "
        "poisoned model than in a clean one (attack success, poisoned arm minus clean arm).",
        _against_clean("eval/asr"),
        expect=">",
        threshold=0.0,
        controls=(TASK_LEARNED,),
        name="backdoor_planted",
    ),
    Claim(
        "Poisoned samples are fitted faster early in training: the poisoned group's early loss drop, "
        "minus that of clean target-class images, is larger in a poisoned model than in a clean one.",
        _against_clean("early/loss_drop_gap_vs_target"),
        expect=">",
        threshold=0.0,
        controls=(TASK_LEARNED, LEARNED, ABSENT),
        name="early_drop_vs_target",
    ),
    Claim(
        "The same holds against clean images of every class on the prior-corrected loss.",
        _against_clean("early/loss_drop_prior_corrected_gap_vs_clean"),
        expect=">",
        threshold=0.0,
        controls=(TASK_LEARNED, LEARNED, ABSENT),
        name="early_drop_vs_clean",
    ),
    Claim(
        "Poisoned images are fitted faster early because of the trigger, not the label: before the backdoor is "
        "learned, the triggered, target-labelled probe images' loss has dropped more in the trigger arm than in "
        "the label-flip arm (the same images relabelled, never triggered).",
        Contrast(
            "early/loss_drop_poison",
            arm=POISONED,
            against=LABEL_FLIP,
            strata=BY_ATTACK,
            pair_on=BY_ATTACK,
            before=Before("early/asr", SATURATED, step="early/probe_step"),
        ),
        expect=">",
        threshold=0.0,
        controls=(TASK_LEARNED, LEARNED),
        name="early_drop_trigger_not_label",
    ),
    Claim(
        "Secondary, at the end of the early window: the poisoned images' loss drop minus that of their own "
        "untriggered copies (both labelled target) is larger in the trigger arm than in the label-flip arm. Part of "
        "it is the untriggered copies' own term (unseen in the trigger arm, training members in the label-flip arm).",
        _against_label_flip("early/loss_drop_gap_vs_relabel"),
        expect=">",
        threshold=0.0,
        controls=(TASK_LEARNED, LEARNED),
        name="early_gap_vs_relabel",
    ),
    Claim(
        "Trigger-dominant neurons come from the trigger, not the label: the trigger arm has more of them than "
        "the label-flip arm on the same triggered inputs.",
        _against_label_flip("neurons/trigger_dominant_count"),
        expect=">",
        threshold=0.0,
        controls=(TASK_LEARNED, LEARNED),
        name="trigger_neurons_not_label",
    ),
    Claim(
        "Poisoning makes trigger-dominant neurons: a poisoned model has more of them than a clean model "
        "on the same triggered inputs.",
        _against_clean("neurons/trigger_dominant_count"),
        expect=">",
        threshold=0.0,
        controls=(TASK_LEARNED, LEARNED, ABSENT),
        name="trigger_neurons",
    ),
    Claim(
        "The trigger-dominant neurons carry the backdoor: ablating the top-k lowers attack success more "
        "than ablating as many random neurons.",
        Contrast(
            "neurons/asr_ablated_topk", arm=POISONED, against_metric="neurons/asr_ablated_random", strata=BY_ATTACK
        ),
        expect="<",
        threshold=0.0,
        controls=(TASK_LEARNED, LEARNED),
        name="ablation",
    ),
    Claim(
        "Clean fine-tuning attenuates the backdoor: attack success falls.",
        Contrast("finetune/asr", arm=POISONED, against_metric="eval/asr", strata=BY_ATTACK),
        expect="<",
        threshold=0.0,
        controls=(TASK_LEARNED, LEARNED),
        name="finetune_attenuates",
    ),
    Claim(
        "Clean fine-tuning does not erase the trigger representation: the top-k neurons keep more than half "
        "of their selectivity.",
        Value("finetune/selectivity_retained", arm=POISONED, strata=BY_ATTACK),
        expect=">",
        threshold=0.5,
        controls=(TASK_LEARNED, LEARNED),
        name="finetune_keeps_neurons",
    ),
)

# The theory's claims (tests/trainers/backdoor/test_backdoor_theory.py); their control: the clean group's
# loss does fall over the early window, so the drop ratio's denominator is a real decrease.
CLEAN_LEARNS = Control(
    "the clean group's early loss falls in every trial, so the ratio's denominator is real",
    Value("theory/rel_drop_clean", strata=("poison_ratio",)),
    expect=">",
    threshold=0.0,
)

THEORY_CLAIMS = (
    Claim(
        "Under SGD the poisoned group is fitted faster than the clean one early on: the poisoned/clean "
        "early relative loss-drop ratio exceeds 1.",
        Value("theory/loss_drop_ratio", strata=("poison_ratio",)),
        expect=">",
        threshold=1.0,
        controls=(CLEAN_LEARNS,),
        name="faster_poisoned",
    ),
    Claim(
        "The frozen-gate signal predicts the group-wise early loss decrease: the frozen-gate network's "
        "drop ratio is within 10% of the ReLU network's.",
        Contrast(
            "theory/predicted_drop_ratio", against_metric="theory/loss_drop_ratio", op="ratio", strata=("poison_ratio",)
        ),
        expect="within",
        threshold=(0.9, 1.1),
        controls=(CLEAN_LEARNS,),
        name="frozen_gate",
    ),
)

REPORT = Report(
    claims=CLAIMS,
    labels=LABELS,
    withheld=(ASR_WITHHELD,),
    items=(
        Table(
            ("eval/clean_acc", "eval/clean_acc_floor", "eval/asr", "eval/ra", "finetune/clean_acc", "finetune/asr"),
            title="clean and poisoned arms side by side (poison_ratio 0: the clean arm): clean accuracy, the "
            "floor it must exceed for ASR to be reported (the control; NaN ASR: withheld, see the notes), "
            "attack success, robust accuracy; after clean fine-tuning",
        ),
        Curve(
            ("early/loss_poison", "early/loss_relabel", "early/loss_target", "early/loss_clean"),
            x="train/step",
            together=True,
            skip_repeats=True,
            title="early training loss of the poisoned group and its controls against steps",
        ),
        Curve(
            (
                "early/grad_coherence_gap_vs_relabel",
                "early/grad_coherence_gap_vs_target",
                "early/loss_drop_gap_vs_relabel",
                "early/loss_drop_gap_vs_target",
                "early/gate_flip_since_last_gap_vs_relabel",
                "early/loss_drop_prior_corrected_gap_vs_clean",
            ),
            x="train/step",
            skip_repeats=True,
            title="early contrasts: poisoned minus the same-label controls (coherence, loss drop, gate "
            "flips), and minus clean images on the prior-corrected loss",
        ),
        Versus(
            "poison_ratio",
            ("eval/asr", "eval/clean_acc"),
            by=("attack",),
            baseline=CLEAN_ARM,
            title="attack success rate and clean accuracy against the poisoning ratio (0: the clean arm)",
        ),
        Versus(
            "poison_ratio",
            ("neurons/trigger_dominant_count",),
            by=("attack",),
            baseline=CLEAN_ARM,
            title="trigger-dominant neurons against the poisoning ratio (0: a clean model on triggered inputs)",
        ),
        Bars(
            ("neurons/trigger_dominant_count", "finetune/trigger_dominant_count"),
            title="trigger-dominant neurons before and after clean fine-tuning",
        ),
        Bars(
            (
                "eval/asr",
                "neurons/asr_ablated_topk",
                "neurons/asr_ablated_random",
                "finetune/asr",
                "finetune/asr_ablated_topk",
            ),
            title="ASR: trained, top-k neurons ablated, random ablated, fine-tuned, fine-tuned and ablated",
        ),
        Table(
            (
                "eval/asr",
                "eval/clean_acc",
                "neurons/trigger_dominant_count",
                "early/grad_coherence_gap_vs_relabel",
                "early/loss_drop_gap_vs_relabel",
                "early/margin_growth_gap_vs_relabel",
                "early/gate_flip_since_last_gap_vs_relabel",
                "early/loss_drop_prior_corrected_gap_vs_clean",
                "finetune/asr",
                "finetune/selectivity_retained",
            ),
            title="final attack success, clean accuracy, trigger-dominant neurons (poison_ratio 0: the "
            "clean baseline), early contrasts against the relabelled control (loss drop, "
            "coherence, margin, gating stability) and the prior-corrected one against clean "
            "images, fine-tuning",
        ),
    ),
)

THEORY_REPORT = Report(
    claims=THEORY_CLAIMS,
    labels=THEORY_LABELS,
    items=(
        Curve(
            ("theory/loss_poison", "theory/loss_clean", "theory/frozen_loss_poison", "theory/frozen_loss_clean"),
            x="theory/step",
            together=True,
            title="group losses of the ReLU net and of its frozen-gate model against SGD steps",
        ),
        Scatter(
            "theory/predicted_drop_ratio",
            "theory/loss_drop_ratio",
            diagonal=True,
            title="measured poisoned/clean early loss-drop ratio against the frozen-gate prediction",
        ),
        Versus(
            "poison_ratio",
            ("theory/loss_drop_ratio", "theory/predicted_drop_ratio"),
            together=True,
            title="early loss-drop ratio (measured, frozen-gate predicted) against the poisoning ratio",
        ),
        Table(
            (
                "theory/loss_drop_ratio",
                "theory/predicted_drop_ratio",
                "theory/frozen_gate_rel_error",
                "theory/signal_ratio",
                "theory/gate_flip_at_t_poison",
                "theory/gate_flip_at_t_clean",
                "theory/gate_flip_error_poison",
                "theory/gate_flip_error_clean",
                "theory/drift_error_poison",
                "theory/flip_loss_error_poison",
                "theory/drift_error_clean",
                "theory/flip_loss_error_clean",
            ),
            title="at the early time T: measured and predicted drop ratios, frozen-gate error, gate flips; "
            "frozen-gate error terms at the last step (loss error = drift + flip)",
        ),
    ),
)
