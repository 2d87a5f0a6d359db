"""Reports of boltz_distill (distillation curves, ``REPORT``) and admet_probe (the ADMET table:
tasks x representations, best per row marked, ``PROBE_REPORT``)."""

from raylab.report.claims import Claim, Contrast, Control, Derived, Value
from raylab.report.spec import Bars, Curve, Report, Table
from trainers.boltz_distill.labels import LABELS, PROBE_LABELS

# The distillation's claim and its control (tests/trainers/boltz_distill/test_bd_science.py): the student
# learns, its held-out distillation loss falls.
DISTILL_LEARNS = Control(
    "the distillation trains: the held-out distillation loss ends below 0.9x its first value",
    Contrast("distill/val_loss", against_at="first", op="ratio", strata=("teachers",)),
    expect="<",
    threshold=0.9,
)

DISTILL_CLAIMS = (
    Claim(
        "A GINE student distilled from a teacher's per-atom embeddings predicts them on held-out molecules "
        "(validation R^2 above 0).",
        Value("distill/val_r2", strata=("teachers",)),
        expect=">",
        threshold=0.0,
        controls=(DISTILL_LEARNS,),
        name="student_fits_teacher",
    ),
)

REPORT = Report(
    claims=DISTILL_CLAIMS,
    labels=LABELS,
    items=(
        Curve(
            ("distill/loss", "distill/val_loss"),
            x="distill/step",
            title="distillation loss (train, validation) against steps",
        ),
        Curve(
            ("distill/val_mse", "distill/val_cosine"),
            x="distill/step",
            title="validation MSE and cosine similarity to the teacher's embeddings",
        ),
        Table(
            ("distill/val_r2", "distill/val_loss", "distill/val_mse", "distill/val_cosine"),
            best="max",
            lower_is_better=("distill/val_loss", "distill/val_mse"),
            title="final validation R^2, loss, MSE and cosine similarity (compare within a teacher)",
        ),
    ),
)

ROW_KEYS = ("features", "student_teachers", "student_layer", "student_checkpoint", "teacher", "teacher_store", "probe")
"""What names a row of the ADMET table: the representation (each distilled student by its
teachers and layer, each teacher by its store) and the probe; only swept keys show."""


def gain_over_mean_predictor(score: float, raw: float, mean_predictor: float) -> float:
    """The probe's sign-normalised test score minus the mean predictor's: ``probe/test/score`` is
    the task's metric with its sign flipped for MAE (``score = -raw``), ``mean_predictor`` is raw."""
    sign = 1.0 if score == raw else -1.0
    return score - sign * mean_predictor


OVER_MEAN = Derived(
    "gain of the test score over the mean predictor's",
    gain_over_mean_predictor,
    ("probe/test/score", "probe/{task}/*", "probe/test/mean_predictor"),
)

# The positive control of the probing claims: the probe finds a known signal, Morgan
# fingerprints with RDKit descriptors beat predicting the training mean on every seed.
PROBE_SEES = Control(
    "the probe sees a known signal: Morgan + descriptors beat the mean predictor on every seed",
    Value(OVER_MEAN, arm={"features": "morgan_descriptors"}, strata=("task",)),
    expect=">",
    threshold=0.0,
)

STUDENT = {"features": "student"}
PROBE_CLAIMS = (
    Claim(
        "Distillation gives a better representation: a distilled student beats the same student at its random "
        "initialisation on ADMET (sign-normalised test score, higher is better).",
        Contrast(
            "probe/test/score",
            arm=STUDENT,
            against={"features": "random_student"},
            strata=("task",),
            pair_on=("task", "probe"),
        ),
        expect=">",
        threshold=0.0,
        controls=(PROBE_SEES,),
        name="student_beats_random",
    ),
    Claim(
        "Boltz-2 representations match or outperform existing models on ADMET: a student distilled from "
        "Boltz-2's trunk scores at most 0.01 below Chemprop's D-MPNN trained end to end.",
        Contrast(
            "probe/test/score",
            arm={"features": "student", "student_teachers": ["boltz2"], "student_layer": "trunk_s"},
            against={"features": "chemprop"},
            strata=("task",),
            pair_on=("task",),
        ),
        expect=">",
        threshold=-0.01,
        controls=(PROBE_SEES,),
        name="boltz2_vs_chemprop",
    ),
    Claim(
        "Boltz-2 representations are complementary to 3D conformer ones: a student distilled from both beats "
        "one distilled from conformers alone.",
        Contrast(
            "probe/test/score",
            arm={"features": "student", "student_teachers": ["boltz2", "conformer"]},
            against={"features": "student", "student_teachers": ["conformer"]},
            strata=("task",),
            pair_on=("task", "probe"),
        ),
        expect=">",
        threshold=0.0,
        controls=(PROBE_SEES,),
        name="complementary",
    ),
)

PROBE_REPORT = Report(
    claims=PROBE_CLAIMS,
    labels=PROBE_LABELS,
    items=(
        Table(
            "probe/{task}/*",
            rows="task",
            columns=ROW_KEYS,
            best="max",
            lower_is_better=("*/mae",),
            title="ADMET: each task's official metric on its test split (mean ± std over scaffold seeds)",
        ),
        Table(
            "probe/test/imputed",
            rows="task",
            columns=ROW_KEYS,
            title="test molecules without features, imputed with the training mean (of probe/test/molecules)",
        ),
        Bars(
            "probe/test/score",
            by=("features", "probe"),
            title="test score per task (sign-normalized: higher is better)",
        ),
        Curve(
            "probe/valid/score",
            x="probe/epoch",
            by=("features", "probe"),
            title="validation score of the MLP probes against epochs",
        ),
    ),
)
