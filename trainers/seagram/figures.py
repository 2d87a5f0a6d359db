"""The seagram report: the headline table (MAP under the original and the true labels, labels
kept, solver calls by stage, unconstrained greedy included), the victim's MAP against the
edge-flip budget per attack, the active-learning comparison (labels kept and MAP against the
training solver calls, per al_strategy), and the victims' training curves."""

from raylab.report.claims import Claim, Contrast, Control, Derived, Value
from raylab.report.spec import Bars, Curve, Report, Table, Versus
from trainers.seagram.labels import LABELS

SEAGRAM, GREEDY = {"attack": "seagram"}, {"attack": "greedy"}
PASSIVE = {"al_strategy": "passive"}
PURE = {"al_strategy": "uncertainty", "al_random_frac": 0.0}
MIXED = {"al_strategy": "uncertainty", "al_random_frac": 0.5}
"""The active-learning arms of ``tune_configs/seagram.yaml``."""
SETTING = ("victim", "budget")


def calls_per_map_drop(train_calls: float, test_calls: float, drop: float) -> float | None:
    """Solver calls (training the attack plus attacking) per unit of MAP the attack takes off;
    undefined when the attack took none off."""
    return (train_calls + test_calls) / drop if drop > 0 else None


CALLS_PER_DROP = Derived(
    "solver calls per MAP drop",
    calls_per_map_drop,
    ("attack/solver_calls_train", "attack/solver_calls_test", "attack/map_drop"),
)

# Positive controls. The MAP instrument: the trained victim ranks far above chance (a random
# ranking's MAP is about the share of relevant pairs). The solver-call instrument: the
# solver-checked greedy attack does lower MAP (tests/trainers/seagram/test_seagram_science.py).
VICTIM_RANKS = Control(
    "the clean victim ranks above chance: its MAP exceeds the share of relevant test pairs in every trial",
    Contrast("victim/map", against_metric="data/pos_rate_test", strata=SETTING),
    expect=">",
    threshold=0.0,
)
GREEDY_BITES = Control(
    "the solver-checked greedy attack lowers MAP in every trial",
    Value("attack/map_drop", arm=GREEDY, strata=SETTING),
    expect=">",
    threshold=0.0,
)
CLASSIFIER_LEARNS = Control(
    "the non-critical-pair classifier learns: its loss at the last active-learning round is below its first",
    Contrast("seagram/clf_loss", against_at="first", strata=SETTING),
    expect="<",
    threshold=0.0,
)
# The AUROC instrument: passive labelling's classifier ranks held-out flips above chance (0.5).
PASSIVE_LEARNS = Control(
    "the passively trained classifier ranks held-out candidate flips above chance: AUROC above 0.5 in every trial",
    Value("clf/auroc", arm=PASSIVE, strata=(*SETTING, "al_budget")),
    expect=">",
    threshold=0.5,
)

CLAIMS = (
    Claim(
        "SEAGRAM significantly worsens the performance of existing models: the victim's MAP falls under the attack.",
        Value("attack/map_drop", arm=SEAGRAM, strata=SETTING),
        expect=">",
        threshold=0.0,
        controls=(VICTIM_RANKS,),
        name="map_drop",
    ),
    Claim(
        "SEAGRAM is solver-efficient: it spends fewer solver calls per unit of MAP drop than the "
        "solver-checked greedy attack (a run that sweeps attack over seagram and greedy).",
        Contrast(CALLS_PER_DROP, arm=SEAGRAM, against=GREEDY, op="ratio", strata=SETTING),
        expect="<",
        threshold=1.0,
        controls=(VICTIM_RANKS, GREEDY_BITES),
        name="solver_efficiency",
    ),
    Claim(
        "Active learning reduces the solver calls of training: at an equal label budget, the classifier "
        "trained by mixed uncertainty sampling ranks held-out candidate flips better (AUROC) than one "
        "trained by passive, classifier-free labelling.",
        Contrast("clf/auroc", arm=MIXED, against=PASSIVE, strata=(*SETTING, "al_budget")),
        expect=">",
        threshold=0.0,
        controls=(CLASSIFIER_LEARNS, PASSIVE_LEARNS),
        name="active_learning",
    ),
    Claim(
        "Pure uncertainty sampling (no random share) ranks held-out candidate flips better (AUROC) than "
        "passive labelling at an equal label budget.",
        Contrast("clf/auroc", arm=PURE, against=PASSIVE, strata=(*SETTING, "al_budget")),
        expect=">",
        threshold=0.0,
        controls=(CLASSIFIER_LEARNS, PASSIVE_LEARNS),
        name="active_learning_pure",
    ),
)

REPORT = Report(
    claims=CLAIMS,
    labels=LABELS,
    items=(
        Table(
            (
                "victim/map",
                "attack/map",
                "attack/map_true_labels",
                "attack/label_preserved",
                "attack/flips_mean",
                "attack/solver_calls_labels",
                "attack/solver_calls_train",
                "attack/solver_calls_test",
            ),
            title="headline: clean MAP, MAP after the attack under the original labels and under the "
            "labels the solver gives afterwards, labels kept, flips, and solver calls behind the "
            "labels used / in training / at attack time (greedy_free: no label check)",
        ),
        Versus(
            "al_budget",
            ("clf/auroc", "clf/precision_at_recall", "attack/label_preserved"),
            by=("al_strategy", "al_random_frac"),
            title="active learning against passive labelling: the classifier's AUROC and precision at "
            "recall on held-out candidate flips, and labels kept by its attack, against the training "
            "solver calls (al_budget), per arm (calls-to-match-passive: python -m trainers.seagram.al_table RUN)",
        ),
        Versus(
            "budget",
            ("victim/map", "attack/map"),
            by=("attack",),
            together=True,
            title="victim MAP before (victim/map) and after the attack against the edge-flip budget",
        ),
        Bars(
            ("attack/solver_calls_labels", "attack/solver_calls_train", "attack/solver_calls_test"),
            by=("attack",),
            title="subgraph-isomorphism solver calls per attack: behind the test labels it conditions "
            "on (made at data generation), training the attack, attacking the test queries",
        ),
        Bars(
            ("attack/label_preserved", "attack/label_preserved_pos", "attack/label_preserved_neg"),
            by=("attack",),
            title="fraction of attacked pairs whose true label is preserved (all, positive, negative)",
        ),
        Curve(
            ("victim/loss", "victim/map_val"),
            x="victim/step",
            by=("victim",),
            title="victim training loss and validation MAP against steps",
        ),
        Table(
            "attack/map",
            rows="victim",
            columns=("attack", "budget"),
            best="min",
            title="victim MAP after the attack (lower: a stronger attack; read with labels kept)",
        ),
    ),
)
