"""What the boltz_distill and admet_probe reports' axes and legends call each metric and swept
key (``Report.labels``); the metrics' definitions are in docs/workloads/boltz_distill.md ("Metrics")."""

LABELS = {
    "teachers": "Teachers",
    "distill/loss": "Distillation loss (train)",
    "distill/val_loss": "Distillation loss (validation)",
    "distill/val_mse": "Validation MSE to the teacher's embeddings",
    "distill/val_cosine": "Validation cosine similarity to the teacher's embeddings",
    "distill/val_r2": "Validation R² of the teacher's embeddings",
    "distill/step": "Distillation step",
    "distill/epoch": "Distillation epoch",
    "distill/molecules_per_s": "Training molecules per second",
}

PROBE_LABELS = {
    "task": "ADMET task",
    "features": "Representation",
    "probe": "Probe",
    "student_teachers": "Student's teachers",
    "student_layer": "Student layer",
    "student_checkpoint": "Student checkpoint",
    "teacher": "Teacher",
    "teacher_store": "Teacher store",
    "probe/*/mae": "Test MAE (lower is better)",
    "probe/*/spearman": "Test Spearman correlation",
    "probe/*/auroc": "Test AUROC",
    "probe/*/auprc": "Test AUPRC",
    "probe/test/score": "Test score (signed: higher is better)",
    "probe/valid/score": "Validation score (signed: higher is better)",
    "probe/test/mean_predictor": "Test score of the mean predictor",
    "probe/test/molecules": "Test molecules",
    "probe/test/imputed": "Test molecules imputed",
    "probe/epoch": "Probe epoch",
    "probe/train_loss": "Probe training loss",
    "probe/{task}/*": "Test metric (the task's official one)",  # last: the catch-all of the patterns
}
