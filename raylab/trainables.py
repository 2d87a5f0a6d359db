"""The Tune trainable of an experiment: the loop itself, or a Tune function driving Ray Train.

Trials that need one CPU worker run the workload's train loop directly as a Ray Tune function
trainable (the Tune path, here): that costs what plain Tune costs. Trials that need several
workers or GPUs run a Tune function that drives a Ray Train ``TorchTrainer`` (Ray Train v2),
whose workers run the same loop (the Ray Train path, ``raylab.train_trial``); that path costs
more to start and pays for itself on multi-worker or GPU work.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable

from raylab import search_space, session, workloads
from raylab.experiment import Experiment
from raylab.progress import TrialGauges
from raylab.files import LAUNCH_DIR_ENV
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
            train_storage=run.join(RUN_INTERNAL, "train"),
        )


def run_trial(settings: TrialSettings, backend: str, config: dict[str, Any]) -> None:
    """Run a workload's train loop in a Tune trial or a Train worker (module level: picklable)."""
    session.hide_unreserved_gpus()
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
    )
    loop = workloads.Workload(config="", loop=settings.loop).train_loop()
    loop(search_space.with_variant(config))


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


DRIVER_RESOURCE = "trial_driver"
"""A custom resource a cluster's head may declare (``cluster/gpu.yaml``): a Ray Train trial's
driver, and the Train controller it starts on its node, then run on the head, which the
autoscaler never removes, instead of on a worker node that may be lost or scaled down."""


def driver_request() -> dict[str, float]:
    """The resource request of a Tune trial that drives a Ray Train run.

    The driver only waits on the Train run, whose workers hold the CPUs and GPUs: one unit of
    ``DRIVER_RESOURCE`` where the cluster has it, else a nominal byte of memory (Ray refuses
    an empty request).
    """
    import ray

    if ray.is_initialized() and ray.cluster_resources().get(DRIVER_RESOURCE, 0) >= 1:
        return {"CPU": 0, DRIVER_RESOURCE: 1}
    return {"CPU": 0, "memory": 1}


def make_trainable(experiment: Experiment, run: RunFolder) -> Callable:
    """The Tune trainable for ``experiment``, with its resource request attached: the loop
    itself (the Tune path) or a driver of a Ray Train run (``raylab.train_trial``)."""
    from ray import tune

    settings = TrialSettings.of(experiment, run)
    if not experiment.resources.uses_ray_train:
        def trainable(config):
            run_trial(settings, "tune", config)
            RunFolder(settings.run).mark_ended(tune.get_context().get_trial_id())

        request = {"CPU": settings.cpus_per_worker}
    else:
        def trainable(config):
            from raylab.train_trial import drive_train_run

            drive_train_run(settings, config)
            RunFolder(settings.run).mark_ended(tune.get_context().get_trial_id())

        request = driver_request()
    trainable.__name__ = experiment.workload
    return tune.with_resources(trainable, request)
