"""What runs in a trial's own process, on either path: the settings a trial carries
(``TrialSettings``, plain values pickled to Ray Train workers) and ``run_trial``, which starts the
trial's ``raylab.session`` and calls the workload's train loop. On the Tune path (single-worker
trials, GPU ones included) that process is the Tune trial's own, holding the GPU Ray assigned it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from raylab import session, workloads
from raylab.config import with_variant
from raylab.experiment import Experiment
from raylab.files import LAUNCH_DIR_ENV
from raylab.launch.gauges import TrialGauges
from raylab.run_folder import RUN_INTERNAL, RunFolder


@dataclass(frozen=True)
class TrialSettings:
    """What a trial needs to know besides its config (plain values, pickled to Train workers)."""

    loop: str
    """The workload's ``module:function`` train loop."""
    checkpoint_every: int
    keep: int | None
    mode: str
    experiment: str
    metric: str
    launch_dir: str
    """Where the sweep was started: relative data paths resolve against it."""
    run: str
    """The run folder (path or URI): the trial's ended marker goes there."""
    workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    worker_request: dict[str, float] = field(default_factory=dict)
    """What each worker asks of Ray (``Resources.worker_request``: CPUs, GPUs, the spot ask)."""
    train_storage: str = ""
    """Where Ray Train keeps a trial's run while a checkpoint is in transit (Ray Train path)."""
    resume: Any = None
    """The checkpoint a Ray Train worker starts from (the trial's, set by its driver)."""

    @classmethod
    def of(cls, experiment: Experiment, run: RunFolder) -> TrialSettings:
        resources = experiment.resources
        return cls(
            loop=workloads.get(experiment.workload).loop,
            checkpoint_every=experiment.checkpoint.every,
            keep=experiment.checkpoint.keep,
            mode=experiment.mode,
            experiment=experiment.name,
            metric=experiment.metric,
            launch_dir=os.getcwd(),
            run=run.location,
            workers=resources.workers,
            cpus_per_worker=resources.cpus_per_worker,
            gpus_per_worker=resources.gpus_per_worker,
            worker_request=resources.worker_request(),
            train_storage=run.join(RUN_INTERNAL, "train"),
        )


def run_trial(settings: TrialSettings, backend: str, config: dict[str, Any]) -> None:
    """Run a workload's train loop in a Tune trial (``backend="tune"``) or a Ray Train worker
    (``"train"``): its session started, relative data paths resolved against the launch folder
    (module level: picklable)."""
    session.hide_unreserved_gpus()
    reset_gpu_peak()
    os.environ[LAUNCH_DIR_ENV] = settings.launch_dir  # relative data paths
    gauges = None
    if backend == "tune":  # on Ray Train, the trial's driver sets them from all ranks' metrics
        from ray import tune

        gauges = TrialGauges(tune.get_context().get_trial_id(), settings.experiment, settings.metric)
    quiet_ray_train_info(worker=backend == "train")
    session.start(
        backend=backend,
        checkpoint_every=settings.checkpoint_every,
        keep=settings.keep,
        mode=settings.mode,
        resume=settings.resume,
        gauges=gauges,
        run=settings.run,
    )
    loop = workloads.resolve(settings.loop)
    loop(with_variant(config))


def reset_gpu_peak() -> None:
    """Start this trial's ``gpu/mem_peak_mib`` from zero: Tune reuses a trial's process for the
    next trial of the same resources (single-worker trials, GPU ones included), and CUDA's peak
    counter would otherwise carry the earlier trial's peak."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


class _DropReportLines(logging.Filter):
    """Drops the INFO line a Ray Train worker logs for every report (under no ``ray.train``
    logger name, so the Train run's log level does not reach it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Reporting training result")


def quiet_ray_train_info(worker: bool = False) -> None:
    """Keep Ray Train's per-checkpoint and per-report INFO lines off the sweep's console.

    (Ray Train's own log files in the Ray session folder still hold them.)"""
    logging.getLogger("ray.train").setLevel(logging.WARNING)
    if worker:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_DropReportLines())
