"""Reports of boltz_distill (distillation curves, ``REPORT``) and admet_probe (the ADMET table:
tasks x representations, best per row marked, ``PROBE_REPORT``)."""

from raylab.report.spec import Bars, Curve, Report, Table

REPORT = Report(items=(
    Curve(("distill/loss", "distill/val_loss"), x="distill/step",
          title="distillation loss (train, validation) against steps"),
    Curve(("distill/val_mse", "distill/val_cosine"), x="distill/step",
          title="validation MSE and cosine similarity to the teacher's embeddings"),
    Table(("distill/val_r2", "distill/val_loss", "distill/val_mse", "distill/val_cosine"), best="max",
          lower_is_better=("distill/val_loss", "distill/val_mse"),
          title="final validation R^2, loss, MSE and cosine similarity (compare within a teacher)"),
))

ROW_KEYS = ("features", "student_teachers", "student_layer", "student_checkpoint", "teacher", "teacher_store",
            "probe")
"""What names a row of the ADMET table: the representation (each distilled student by its
teachers and layer, each teacher by its store) and the probe; only swept keys show."""

PROBE_REPORT = Report(items=(
    Table("probe/{task}/*", rows="task", columns=ROW_KEYS, best="max",
          lower_is_better=("*/mae",),
          title="ADMET: each task's official metric on its test split (mean ± std over scaffold seeds)"),
    Table("probe/test/imputed", rows="task", columns=ROW_KEYS,
          title="test molecules without features, imputed with the training mean (of probe/test/molecules)"),
    Bars("probe/test/score", by=("features", "probe"),
         title="test score per task (sign-normalized: higher is better)"),
    Curve("probe/valid/score", x="probe/epoch", by=("features", "probe"),
          title="validation score of the MLP probes against epochs"),
))
