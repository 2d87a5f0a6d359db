"""Published TDC ADMET leaderboard figures, printed beside our rows by ``table.py``.

Source: the TDC ADMET benchmark group leaderboard (https://tdcommons.ai/benchmark/admet_group/,
one page per task): TDC's fixed test set, the scaffold train/valid split of seeds 1-5, the
official metric, mean over the 5 seeds. The figures below are as quoted in raylab's issue 44
(the leaderboard's top entry, and Chemprop-RDKit's: Chemprop's D-MPNN with RDKit descriptor
features); they were not fetched from TDC here (no internet on the machine that wrote this),
and only these five tasks are quoted. A task we report without a TDC counterpart says so; the
offline ``solubility`` task is shown beside AqSolDB's figure, marked as different data and split.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = (
    "TDC ADMET group leaderboard (tdcommons.ai/benchmark/admet_group), scaffold split seeds 1-5, "
    "mean over seeds; figures as quoted in issue 44, not fetched here"
)


@dataclass(frozen=True)
class Published:
    """One task's published figures (the task's official metric)."""

    metric: str
    best: float
    """The leaderboard's top entry."""
    chemprop_rdkit: float
    """Chemprop-RDKit's entry."""


BOARD = {
    "caco2_wang": Published("mae", 0.276, 0.330),
    "ames": Published("roc-auc", 0.871, 0.850),
    "herg": Published("roc-auc", 0.880, 0.840),
    "lipophilicity_astrazeneca": Published("mae", 0.460, 0.467),
    "solubility_aqsoldb": Published("mae", 0.725, 0.761),
}
NEAREST = {"solubility": "solubility_aqsoldb"}
"""Offline tasks shown beside a TDC task that measures the same property on other data."""
ROWS = (("TDC leaderboard: best", "best"), ("TDC leaderboard: Chemprop-RDKit", "chemprop_rdkit"))


def cell(task: str, which: str) -> str:
    """The table cell of published figure ``which`` (``best``/``chemprop_rdkit``) for ``task``."""
    from trainers.boltz_distill import ADMET_METRICS

    if task in BOARD:
        return f"{getattr(BOARD[task], which):.3f} (TDC)"
    if task in NEAREST:
        return f"{getattr(BOARD[NEAREST[task]], which):.3f} ({NEAREST[task]}: different data and split)"
    if task in ADMET_METRICS:
        return "not quoted"
    return "no TDC task"
