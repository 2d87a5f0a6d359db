"""Published TDC ADMET group figures, printed beside our rows by ``table.py``.

Source (read 2026-12-04): the method comparison of the ``MasterDGL/admet-literature`` repository,
``en/docs/comparison.md`` at commit ``70ad3ac41de624eaa34653385c257055c0dcd218``
(https://github.com/MasterDGL/admet-literature/blob/70ad3ac41de624eaa34653385c257055c0dcd218/en/docs/comparison.md),
whose own sources were checked on 2026-09-22. It tables, per TDC ADMET group task, the mean ±
std over TDC's five scaffold seeds of selected methods, each linked to its TDC leaderboard page
(tdcommons.ai/benchmark/admet_group/<NN><task>/) or to a paper table (KPGT's Supplementary Table 8,
MolE's Table 1); the figures below are copied from it, one per task and row:

- ``chemprop_rdkit``: the TDC leaderboard entry of Chemprop-RDKit (Chemprop's D-MPNN with the
  200 normalized RDKit 2D descriptors as extra features).
- ``best``: the best mean among the methods that compilation collects (its first row). This is
  **not** TDC's leaderboard top entry: the compilation holds six to eight selected methods per
  task, and on some tasks its best is a paper's own table (KPGT, MolE) rather than a leaderboard
  submission; ``Figure.where`` says which. On ``pgp_broccatelli`` KPGT (0.938 ± 0.004) and
  MapLight + GNN (0.938 ± 0.002) tie; the compilation lists KPGT first and so do we.

What was and was not checked:

- Every figure was read from that one file; none was fetched from tdcommons.ai (no internet on
  the machine that wrote this). The compilation's own figures were not audited against TDC.
- Chemprop-RDKit's figure matches a second, independent copy on the 12 tasks of
  ``CROSS_CHECKED`` (the "Previous Best" column of ChemFM's ADMET table,
  ``TheLuoFengLab/ChemFM`` ``finetuning/property_prediction/readme.md`` at commit
  ``007ffe03e6e712b5f32c35e49683506068cb3c4a``, where Chemprop-RDKit is that column's entry), and
  on ``ppbr_az`` a third-party snapshot of the PPBR board taken 2026-09-15 shows 8.288 ± 0.173 too.
  On the other 8 tasks it rests on the compilation alone.
- ``bioavailability_ma`` has no Chemprop-RDKit figure: the compilation leaves out every TDC
  leaderboard row of that task (the TDC page repeats P-gp entries with identical means and
  stds), so its Bioavailability table holds only KPGT and MolE. It prints "not quoted".
- The five "best" figures this file held before (quoted without a source: caco2_wang 0.276,
  ames 0.871, herg 0.880, lipophilicity_astrazeneca 0.460, solubility_aqsoldb 0.725) agree
  with the compilation only on herg (MapLight + GNN 0.880). caco2_wang's 0.276 is MapLight's,
  now second to CaliciBoost's 0.256; ames 0.871 is in neither source (the compilation's best is
  MapLight + GNN 0.869); lipophilicity 0.460 and solubility 0.725 are ChemFM's own results in its
  README, which the compilation does not collect (its best there: MolE 0.406, KPGT 0.714). The
  five Chemprop-RDKit figures held before (0.330, 0.850, 0.840, 0.467, 0.761) all agree.

A task we report without a TDC counterpart says so; the offline ``solubility`` task is shown
beside AqSolDB's figures, marked as different data and split.
"""

from __future__ import annotations

from dataclasses import dataclass

REPO = "MasterDGL/admet-literature"
PATH = "en/docs/comparison.md"
COMMIT = "70ad3ac41de624eaa34653385c257055c0dcd218"
READ_ON = "2026-12-04"
SOURCE = (
    f"{REPO}/{PATH} @ {COMMIT[:7]} (read {READ_ON}; its sources checked 2026-09-22): TDC scaffold "
    "split seeds 1-5, mean ± std; best = best of the methods that compilation collects, not TDC's top entry"
)

TDC = "TDC leaderboard"
KPGT = "its paper, Supp. Table 8"
MOLE = "its paper, Table 1"


@dataclass(frozen=True)
class Figure:
    """One published mean ± std over TDC's 5 seeds, with the method and where it was reported."""

    mean: float
    std: float
    method: str
    where: str
    """``TDC leaderboard`` or the paper table the compilation links."""


@dataclass(frozen=True)
class Published:
    """One task's published figures (the task's official metric)."""

    metric: str
    best: Figure
    """The best mean among the compilation's methods."""
    chemprop_rdkit: Figure | None
    """Chemprop-RDKit's TDC leaderboard entry, or ``None`` (then ``missing`` says why)."""
    missing: str = ""


def _cr(mean: float, std: float) -> Figure:
    return Figure(mean, std, "Chemprop-RDKit", TDC)


BOARD = {
    "caco2_wang": Published("mae", Figure(0.256, 0.006, "CaliciBoost", TDC), _cr(0.330, 0.024)),
    "hia_hou": Published("roc-auc", Figure(0.989, 0.001, "MapLight + GNN", TDC), _cr(0.981, 0.002)),
    "pgp_broccatelli": Published("roc-auc", Figure(0.938, 0.004, "KPGT", KPGT), _cr(0.886, 0.016)),
    "bioavailability_ma": Published(
        "roc-auc",
        Figure(0.750, 0.022, "KPGT", KPGT),
        None,
        "the source drops TDC's Bioavailability_Ma board (repeated P-gp rows)",
    ),
    "lipophilicity_astrazeneca": Published("mae", Figure(0.406, 0.009, "MolE", MOLE), _cr(0.467, 0.006)),
    "solubility_aqsoldb": Published("mae", Figure(0.714, 0.011, "KPGT", KPGT), _cr(0.761, 0.025)),
    "bbb_martins": Published("roc-auc", Figure(0.916, 0.001, "MapLight", TDC), _cr(0.869, 0.027)),
    "ppbr_az": Published("mae", Figure(7.229, 0.168, "MolE", MOLE), _cr(8.288, 0.173)),
    "vdss_lombardo": Published("spearman", Figure(0.713, 0.007, "MapLight + GNN", TDC), _cr(0.389, 0.075)),
    "cyp2c9_veith": Published("pr-auc", Figure(0.859, 0.001, "MapLight + GNN", TDC), _cr(0.777, 0.003)),
    "cyp2d6_veith": Published("pr-auc", Figure(0.790, 0.001, "MapLight + GNN", TDC), _cr(0.673, 0.007)),
    "cyp3a4_veith": Published("pr-auc", Figure(0.916, 0.000, "MapLight + GNN", TDC), _cr(0.876, 0.003)),
    "cyp2c9_substrate_carbonmangels": Published("pr-auc", Figure(0.450, 0.044, "KPGT", KPGT), _cr(0.400, 0.008)),
    "cyp3a4_substrate_carbonmangels": Published("roc-auc", Figure(0.692, 0.019, "MolE", MOLE), _cr(0.619, 0.030)),
    "cyp2d6_substrate_carbonmangels": Published("pr-auc", Figure(0.737, 0.016, "KPGT", KPGT), _cr(0.686, 0.031)),
    "half_life_obach": Published("spearman", Figure(0.578, 0.032, "MolE", MOLE), _cr(0.239, 0.019)),
    "clearance_hepatocyte_az": Published("spearman", Figure(0.498, 0.009, "MapLight + GNN", TDC), _cr(0.430, 0.021)),
    "clearance_microsome_az": Published("spearman", Figure(0.637, 0.010, "KPGT", KPGT), _cr(0.599, 0.025)),
    "ld50_zhu": Published("mae", Figure(0.545, 0.010, "KPGT", KPGT), _cr(0.625, 0.022)),
    "herg": Published("roc-auc", Figure(0.880, 0.002, "MapLight + GNN", TDC), _cr(0.840, 0.007)),
    "ames": Published("roc-auc", Figure(0.869, 0.002, "MapLight + GNN", TDC), _cr(0.850, 0.004)),
    "dili": Published("roc-auc", Figure(0.929, 0.013, "KPGT", KPGT), _cr(0.887, 0.011)),
}
CROSS_CHECKED = frozenset(
    {
        "caco2_wang",
        "hia_hou",
        "lipophilicity_astrazeneca",
        "solubility_aqsoldb",
        "cyp2c9_veith",
        "cyp2d6_veith",
        "cyp3a4_veith",
        "cyp2c9_substrate_carbonmangels",
        "cyp2d6_substrate_carbonmangels",
        "cyp3a4_substrate_carbonmangels",
        "clearance_microsome_az",
        "ames",
    }
)
"""Tasks whose Chemprop-RDKit figure ChemFM's README repeats, equal to the digit."""
NEAREST = {"solubility": "solubility_aqsoldb"}
"""Offline tasks shown beside a TDC task that measures the same property on other data."""
ROWS = (("published: best of compilation", "best"), ("published: Chemprop-RDKit (TDC)", "chemprop_rdkit"))


def _figure(figure: Figure, which: str) -> str:
    text = f"{figure.mean:.3f} ± {figure.std:.3f}"
    return text if which == "chemprop_rdkit" else f"{text} ({figure.method}; {figure.where})"


def cell(task: str, which: str) -> str:
    """The table cell of published figure ``which`` (``best``/``chemprop_rdkit``) for ``task``."""
    from trainers.boltz_distill import ADMET_METRICS

    target = task if task in BOARD else NEAREST.get(task)
    if target is None:
        return "not quoted (no figure read)" if task in ADMET_METRICS else "no TDC task"
    figure = getattr(BOARD[target], which)
    if figure is None:
        return f"not quoted: {BOARD[target].missing}"
    text = _figure(figure, which)
    return text if target == task else f"{text} [{target}: different data and split]"
