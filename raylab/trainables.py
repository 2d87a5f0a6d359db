"""The Tune trainable of an experiment: the loop itself, or a Tune function driving Ray Train.

Trials that need one CPU worker run the workload's train loop directly as a Ray Tune function
trainable: that costs what plain Tune costs. Trials that need several workers or GPUs run a
Tune function that drives a Ray Train ``TorchTrainer`` (Ray Train v2), whose workers run the
same loop; that path costs more to start and pays for itself on multi-worker or GPU work.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from raylab import search_space, session, storage, workloads
from raylab.experiment import Experiment
from raylab.run_files import RUN_INTERNAL


def trial_settings(experiment: Experiment) -> dict[str, Any]:
    """What a trial needs to know besides its config (all plain values, pickled to workers)."""
    return {
        "loop": workloads.get(experiment.workload).loop,
        "checkpoint_every": experiment.checkpoint.every,
        "keep": experiment.checkpoint.keep,
        "mode": experiment.mode,
    }


def run_trial(settings: dict[str, Any], backend: str, config: dict[str, Any]) -> None:
    """Run a workload's train loop in a Tune trial or a Train worker (module level: picklable)."""
    session.hide_unreserved_gpus()
    session.start(
        backend=backend,
        checkpoint_every=settings["checkpoint_every"],
        keep=settings["keep"],
        mode=settings["mode"],
    )
    loop = workloads.Workload(config="", loop=settings["loop"]).train_loop()
    loop(search_space.with_variant(config))


def drive_train_run(settings: dict[str, Any], config: dict[str, Any]) -> None:
    """A Tune trial that runs the loop on Ray Train workers (several workers, or GPUs)."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    context = tune.get_context()
    trainer = TorchTrainer(
        functools.partial(run_trial, settings, "train"),
        train_loop_config=config,
        torch_config=TorchConfig(
            backend=distributed_backend(settings["gpus_per_worker"], settings["cpus_per_worker"])
        ),
        scaling_config=ray.train.ScalingConfig(
            num_workers=settings["workers"],
            use_gpu=settings["gpus_per_worker"] > 0,
            resources_per_worker={
                "CPU": settings["cpus_per_worker"],
                **({"GPU": settings["gpus_per_worker"]} if settings["gpus_per_worker"] else {}),
            },
        ),
        run_config=ray.train.RunConfig(
            # A stable name: a restarted trial finds its Train run and its latest checkpoint.
            name=context.get_trial_id(),
            storage_path=settings["train_storage"],
            callbacks=[TuneReportCallback()],
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=settings["keep"]),
            failure_config=ray.train.FailureConfig(max_failures=settings["max_failures"]),
        ),
    )
    trainer.fit()


def distributed_backend(
    gpus_per_worker: float, cpus_per_worker: float = 0, cuda: bool | None = None
) -> str:
    """The torch.distributed backend of a trial's Train workers: nccl on CUDA, gloo otherwise.

    ``cuda`` says whether the workers' GPUs are CUDA devices torch can use; by default a task
    with one worker's resource request answers that, on a node like theirs (so that on an
    autoscaling cluster it asks for the node type the workers will need). A GPU resource with
    no CUDA behind it, as on a simulated cluster, gets gloo, and the loop trains on the CPU.
    """
    if gpus_per_worker <= 0:
        return "gloo"
    if cuda is None:
        import ray

        probe = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker)(_cuda_usable)
        cuda = ray.get(probe.remote())
    return "nccl" if cuda else "gloo"


def _cuda_usable() -> bool:
    import torch

    return torch.cuda.is_available()


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


def make_trainable(experiment: Experiment, run_path: str) -> Callable:
    """The Tune trainable for ``experiment``, with its resource request attached."""
    from ray import tune

    settings = trial_settings(experiment)
    resources = experiment.resources
    if not resources.uses_ray_train:
        def trainable(config):
            run_trial(settings, "tune", config)

        request = {"CPU": resources.cpus_per_worker}
    else:
        settings |= {
            "workers": resources.workers,
            "cpus_per_worker": resources.cpus_per_worker,
            "gpus_per_worker": resources.gpus_per_worker,
            "max_failures": experiment.failure.max_failures,
            "train_storage": storage.join(run_path, RUN_INTERNAL, "train"),
        }
        def trainable(config):
            drive_train_run(settings, config)

        request = driver_request()
    trainable.__name__ = experiment.workload
    return tune.with_resources(trainable, request)
