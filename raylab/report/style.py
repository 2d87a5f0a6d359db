"""How a report's figures look and where they go: file formats, the uncertainty drawn, the
SMOKE watermark, and the workload's labels for metric names and config keys."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Mapping

from raylab.report.uncertainty import DEFAULT, check

FIGURE_FORMATS = ("png", "svg", "pdf")
"""PNG is always written (the HTML report embeds it); SVG and PDF on request, beside it."""
WATERMARK = "SMOKE"
"""Drawn across every figure of a smoke run (``smoke: true`` in the run's experiment.yaml)."""

_PLACEHOLDER = re.compile(r"\{\w+\}")


@dataclass(frozen=True)
class FigureStyle:
    formats: tuple[str, ...] = ("png",)
    """File formats written for each figure; ``png`` first and always."""
    uncertainty: str = DEFAULT
    """``std``, ``sem`` or ``ci95`` (``raylab.report.uncertainty``)."""
    smoke: bool = False
    """Watermark every figure SMOKE: the run used its experiment's smoke settings."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Metric name or config key -> what axes and legends say (``Report.labels``)."""

    def __post_init__(self):
        check(self.uncertainty, "FigureStyle")
        unknown = [f for f in self.formats if f not in FIGURE_FORMATS]
        if unknown:
            raise ValueError(f"figure formats must be among {', '.join(FIGURE_FORMATS)}, got {', '.join(unknown)}")
        object.__setattr__(self, "formats", ("png", *(f for f in dict.fromkeys(self.formats) if f != "png")))

    def label(self, name: str) -> str:
        """The declared label of a metric name or config key: the exact name, else the first
        declared pattern (``*``, ``{key}``) that matches it; the name itself when none does."""
        return label(self.labels, name)


def label(labels: Mapping[str, str], name: str) -> str:
    if name in labels:
        return labels[name]
    for pattern, text in labels.items():
        glob = _PLACEHOLDER.sub("*", pattern)
        if glob != name and any(c in glob for c in "*?[") and fnmatch.fnmatchcase(name, glob):
            return text
    return name


def parse_formats(text: str) -> tuple[str, ...]:
    """``svg,pdf`` -> ``("png", "svg", "pdf")``; ``ValueError`` naming an unknown format."""
    names = tuple(f.strip().lower() for f in text.split(",") if f.strip())
    unknown = [f for f in names if f not in FIGURE_FORMATS]
    if unknown or not names:
        raise ValueError(f"--figure-formats {text}: expected a comma list of {', '.join(FIGURE_FORMATS)}")
    return FigureStyle(formats=names).formats


# ------------------------------------------------------------------------ colours and scales

LEGEND = {"fontsize": 7, "loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0}
"""Where every legend goes: right of its axes, outside the data (the layout makes room)."""
LEGEND_ROWS = 16
"""Entries per legend column before a second column starts."""
DECADES_FOR_LOG = 2.0
"""A metric whose positive values span more than this many decades is drawn on a log axis."""


def series_colors(n: int) -> list:
    """``n`` distinct colours, one per series: matplotlib's ``tab10`` up to 10, ``tab20`` up to
    20, else ``n`` evenly spaced samples of ``viridis`` (no colour is reused)."""
    import matplotlib
    import numpy as np

    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [matplotlib.colormaps["tab20"](i) for i in range(n)]
    return [matplotlib.colormaps["viridis"](v) for v in np.linspace(0.0, 0.92, n)]


def legend_columns(entries: int) -> int:
    return max(1, -(-entries // LEGEND_ROWS))


def log_spaced(values) -> bool:
    """Whether a grid's values are spaced by a factor rather than a step: all positive, three or
    more distinct values whose successive ratios agree within a factor of 1.5 while their
    differences do not agree within 10%, or two or more spanning more than two decades
    (``1e-4, 3e-4, 1e-3``; ``1, 2, 4, 8``; not ``0.1, 0.2, 0.3``)."""
    import numpy as np

    values = list(values)
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) != len(values) or not numbers:
        return False
    grid = np.unique(np.asarray(numbers, dtype=float))
    if grid.size < 2 or not (grid > 0).all() or not np.isfinite(grid).all():
        return False
    if spans_decades(grid):
        return True
    if grid.size < 3:
        return False
    ratios, steps = grid[1:] / grid[:-1], np.diff(grid)
    return bool(ratios.max() / ratios.min() <= 1.5 and steps.max() / steps.min() > 1.1)


def spans_decades(values, decades: float = DECADES_FOR_LOG) -> bool:
    """Whether the finite ``values`` are all positive and span more than ``decades`` decades:
    ``log10(max / min) > decades``."""
    import numpy as np

    array = np.asarray([v for v in values if v is not None], dtype=float)
    array = array[np.isfinite(array)]
    return bool(array.size >= 2 and (array > 0).all() and np.log10(array.max() / array.min()) > decades)
