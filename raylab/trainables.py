"""The Tune trainable of an experiment: the loop itself, or a Tune function driving Ray Train.

Trials that need one CPU worker run the workload's train loop directly as a Ray Tune function
trainable: that costs what plain Tune costs. Trials that need several workers or GPUs run a
Tune function that drives a Ray Train ``TorchTrainer`` (Ray Train v2), whose workers run the
same loop; that path costs more to start and pays for itself on multi-worker or GPU work.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from raylab import search_space, session, workloads
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
    # Ray Train logs one INFO line per checkpoint, which the driver's console repeats.
    logging.getLogger("ray.train").setLevel(logging.WARNING)
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
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    context = tune.get_context()
    trainer = TorchTrainer(
        functools.partial(run_trial, settings, "train"),
        train_loop_config=config,
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
            "train_storage": f"{run_path}/{RUN_INTERNAL}/train",
        }
        def trainable(config):
            drive_train_run(settings, config)

        # The driver only waits on the Train run, whose workers hold the CPUs and GPUs; Ray
        # refuses an empty request, so the driver asks for a nominal byte of memory.
        request = {"CPU": 0, "memory": 1}
    trainable.__name__ = experiment.workload
    return tune.with_resources(trainable, request)
