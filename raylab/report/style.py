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
