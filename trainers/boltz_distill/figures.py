"""Reports of boltz_distill (distillation curves, ``REPORT``) and admet_probe (the ADMET table:
tasks x representations, best per row marked, ``PROBE_REPORT``)."""

from raylab.report_spec import Bars, Curve, Report, Table

REPORT = Report(items=(
    Curve(("distill/loss", "distill/val_loss"), x="distill/step",
          title="distillation loss (train, validation) against steps"),
    Curve(("distill/val_mse", "distill/val_cosine"), x="distill/step",
          title="validation MSE and cosine similarity to the teacher's embeddings"),
    Table(("distill/val_loss", "distill/val_mse", "distill/val_cosine"), best="max",
          lower_is_better=("distill/val_loss", "distill/val_mse"),
          title="final validation loss, MSE and cosine similarity"),
))

PROBE_REPORT = Report(items=(
    Table("probe/{task}/*", rows="task", columns=("features", "probe"), best="max",
          lower_is_better=("*/mae",),
          title="ADMET: each task's official metric on its test split (mean ± std over scaffold seeds)"),
    Bars("probe/test/score", by=("features", "probe"),
         title="test score per task (sign-normalized: higher is better)"),
    Curve("probe/valid/score", x="probe/epoch", by=("features", "probe"),
          title="validation score of the MLP probes against epochs"),
))
