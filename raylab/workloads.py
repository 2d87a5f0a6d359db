"""The workload registry: names to a Config class and a train loop, imported on first use.

The registry itself is ``trainers.WORKLOADS`` (explicit, one line per workload); this module
resolves its import paths lazily so that listing or validating experiments stays fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from raylab.errors import UserError


@dataclass(frozen=True)
class Workload:
    """Where a workload's pieces live, as ``module:attribute`` import paths."""

    config: str
    """The frozen Config dataclass, e.g. ``trainers.dqn_softlinf.config:Config``."""
    loop: str
    """The ``train_loop(config: dict)`` that a Ray Tune trial or Ray Train worker runs."""
    metrics: tuple[str, ...] = ()
    """Metric names the loop reports; an experiment's ``metric`` must be one of them."""
    description: str = ""
    """One line for ``--list``."""
    preflight: str = ""
    """Optional ``module:function`` taking a built Config and raising ``UserError`` when this
    machine cannot run it (dataset missing or corrupted, replay buffer larger than memory).
    The CLI calls it before starting Ray on a local run; loops call it again at their start."""
    figures: str = ""
    """Optional ``module:attribute`` of the workload's ``raylab.report_spec.Report``: the
    figures and tables ``python -m raylab.report`` draws (``trainers/<name>/figures.py``)."""
    data_parallel: bool = False
    """Whether the loop shards its data across Ray Train workers, so that ``workers > 1``
    trains one model on more data per step; a workload that is not is refused for
    ``workers > 1`` at validation."""

    def config_class(self) -> type:
        return _resolve(self.config)

    def preflight_check(self) -> Callable[[Any], None] | None:
        return _resolve(self.preflight) if self.preflight else None

    def train_loop(self) -> Callable[[dict[str, Any]], None]:
        return _resolve(self.loop)

    def report_spec(self) -> Any:
        """The declared ``Report`` (figures and tables), or None when there is none."""
        return _resolve(self.figures) if self.figures else None


def _resolve(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def registry() -> dict[str, Workload]:
    """All registered workloads by name."""
    from trainers import WORKLOADS

    return WORKLOADS


def get(name: str) -> Workload:
    """The workload called ``name``; a ``UserError`` listing the known ones otherwise."""
    workloads = registry()
    if name not in workloads:
        raise UserError(f"unknown workload '{name}'; available: {', '.join(sorted(workloads))}")
    return workloads[name]
