"""The Tune trainable of an experiment: the loop itself, or a Tune function driving Ray Train.

Trials that need one CPU worker run the workload's train loop directly as a Ray Tune function
trainable (the Tune path): that costs what plain Tune costs. Trials that need several workers or
GPUs run a Tune function that drives a Ray Train ``TorchTrainer`` (Ray Train v2), whose workers
run the same loop (the Ray Train path, ``raylab.launch.train_path``); that path costs more to
start and pays for itself on multi-worker or GPU work. Either way the trial's process runs
``raylab.launch.trial``.
"""

from __future__ import annotations

from typing import Callable

from raylab.experiment import Experiment
from raylab.launch.trial import TrialSettings, run_trial
from raylab.run_folder import RunFolder

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
    itself (the Tune path) or a driver of a Ray Train run (``raylab.launch.train_path``)."""
    from ray import tune

    settings = TrialSettings.of(experiment, run)
    if not experiment.resources.uses_ray_train:

        def trainable(config):
            run_trial(settings, "tune", config)
            RunFolder(settings.run).mark_ended(tune.get_context().get_trial_id())

        request = dict(settings.worker_request)
    else:

        def trainable(config):
            from raylab.launch.train_path import drive_train_run  # Ray Train: only on this path

            drive_train_run(settings, config)
            RunFolder(settings.run).mark_ended(tune.get_context().get_trial_id())

        request = driver_request()
    trainable.__name__ = experiment.workload
    return tune.with_resources(trainable, request)
