"""The Tune trainable of an experiment: the loop itself, or a Tune function driving Ray Train.

Single-worker trials, on CPUs or a GPU (share), run the workload's train loop directly as a
Ray Tune function trainable (the Tune path): the trial's one process holds its CPUs and GPU on
its worker node (Ray narrows ``CUDA_VISIBLE_DEVICES`` to the GPU), costs what plain Tune
costs, and holds nothing on the head. Trials of several workers run a Tune function that
drives a Ray Train ``TorchTrainer`` (Ray Train v2), whose workers run the same loop (the Ray
Train path, ``raylab.launch.train_path``); its driver and Train controller live on the head
(``DRIVER_RESOURCE``). ``benchmarks/trial_paths.py`` measures both paths for single-GPU trials
side by side. Either way the trial's process runs ``raylab.launch.trial``.
"""

from __future__ import annotations

from typing import Callable

from raylab.cluster import DRIVER_RESOURCE
from raylab.experiment import Experiment
from raylab.launch.trial import TrialSettings, run_trial
from raylab.run_folder import RunFolder


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


def make_trainable(experiment: Experiment, run: RunFolder, ray_train: bool | None = None) -> Callable:
    """The Tune trainable for ``experiment``, with its resource request attached: the loop
    itself (the Tune path) or a driver of a Ray Train run (``raylab.launch.train_path``).

    ``ray_train`` chooses the path; by default ``experiment.resources.uses_ray_train`` (several
    workers). A benchmark forces the Ray Train path on a single-worker trial to compare them.
    """
    from ray import tune

    settings = TrialSettings.of(experiment, run)
    if ray_train is None:
        ray_train = experiment.resources.uses_ray_train
    if not ray_train:
        if settings.workers > 1:
            raise ValueError(f"a trial of {settings.workers} workers runs on Ray Train, not the Tune path")

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
