"""``python -m raylab.report RUN_DIR_OR_EXPERIMENT``: a sweep's figures and tables in one report.

    python -m raylab.report results/toy-smoke-20260101-120000          # a run folder
    python -m raylab.report toy                                        # newest run of toy
    python -m raylab.report s3://bucket/runs/dqn-20260101-120000 --out report-dqn --format md
    python -m raylab.report dqn_softlinf --claims                     # the claims table, plain text
    python -m raylab.report dqn_softlinf --claims --format json       # ... as JSON, for a lab's CI
    python -m raylab.report backdoor --figure-formats svg,pdf --uncertainty ci95   # for a paper
    python -m raylab.report results/toy-20260101-120000 results/toy-20260102-090000   # two runs compared

Reads the run folder (a local path, or a URI that Ray's storage reads through pyarrow), groups
the trials by their swept hyperparameters other than the seed, and writes PNG figures (SVG and
PDF beside them with ``--figure-formats``; a smoke run's are watermarked SMOKE), one
report (HTML with the PNG figures embedded, or Markdown beside them), the tables as CSV and
``report.json`` (every number in the report). A sweep still running gives a partial report that
says which trials have not reported, which failed (with the first line of their error) and
which declared metrics no trial reported. The figures and tables are what the workload
declares in its ``figures.py`` (see ``raylab.report.spec``); so are the paper's claims, each
stated with its estimate over seeds, a 95% interval, the seeds that agree, its positive
control and a verdict (``raylab.report.claims``, ``raylab.report.evidence``), and the
rliable-style aggregates of a suite of tasks (``raylab.report.suite``). A run with a search
space also gets the sweep view: parallel coordinates, hyperparameter importance, learning
curves against steps and wall-clock time (``raylab.report.sweep_view``). Two runs named give
one comparison instead: their curves overlaid and their claims side by side
(``raylab.report.compare``).
"""

from __future__ import annotations

import importlib

_NAMES = {
    name: "raylab.report.writer"
    for name in (
        "parser",
        "main",
        "claims_report",
        "write_report",
        "write_comparison",
        "build",
        "declared_report",
        "figure_style",
        "default_out",
        "config_defaults",
        "status_notes",
        "trial_table",
        "_facts",
        "FORMATS",
    )
}
"""The report's entry points, each with the module that defines it; imported on first use, so
that a workload's ``figures.py`` importing ``raylab.report.spec`` or ``raylab.report.claims``
loads neither the build nor its numerics (no scipy, no matplotlib)."""

__all__ = list(_NAMES)


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
