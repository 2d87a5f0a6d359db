"""The Tune trainable of an experiment: the loop itself, or a Tune function driving Ray Train.

Trials that need one CPU worker run the workload's train loop directly as a Ray Tune function
trainable: that costs what plain Tune costs. Trials that need several workers or GPUs run a
Tune function that drives a Ray Train ``TorchTrainer`` (Ray Train v2), whose workers run the
same loop; that path costs more to start and pays for itself on multi-worker or GPU work.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any, Callable

from raylab import paths, search_space, session, storage, workloads
from raylab.gauges import TrialGauges
from raylab.experiment import Experiment
from raylab.run_files import RUN_INTERNAL, mark_trial_ended


def trial_settings(experiment: Experiment) -> dict[str, Any]:
    """What a trial needs to know besides its config (all plain values, pickled to workers)."""
    return {
        "loop": workloads.get(experiment.workload).loop,
        "checkpoint_every": experiment.checkpoint.every,
        "keep": experiment.checkpoint.keep,
        "mode": experiment.mode,
        "experiment": experiment.name,
        "metric": experiment.metric,
        "launch_dir": os.getcwd(),
    }


def run_trial(settings: dict[str, Any], backend: str, config: dict[str, Any]) -> None:
    """Run a workload's train loop in a Tune trial or a Train worker (module level: picklable)."""
    session.hide_unreserved_gpus()
    os.environ[paths.LAUNCH_DIR_ENV] = settings["launch_dir"]  # relative data paths
    gauges = None
    if backend == "tune":  # on Ray Train, the trial's driver sets them from all ranks' metrics
        from ray import tune

        gauges = TrialGauges(tune.get_context().get_trial_id(), settings["experiment"], settings["metric"])
    quiet_ray_train_info(worker=backend == "train")
    session.start(
        backend=backend,
        checkpoint_every=settings["checkpoint_every"],
        keep=settings["keep"],
        mode=settings["mode"],
        resume=settings.get("resume"),
        gauges=gauges,
    )
    loop = workloads.Workload(config="", loop=settings["loop"]).train_loop()
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


def drive_train_run(settings: dict[str, Any], config: dict[str, Any]) -> None:
    """A Tune trial that runs the loop on Ray Train workers (several workers, or GPUs).

    One retry budget: the Train run itself never retries a failure of its workers
    (``FailureConfig(max_failures=0)``), so a failed worker fails the Tune trial, which Tune
    restarts up to the experiment's ``failure.max_failures`` times from the trial's latest
    checkpoint. Each attempt (and each
    restart after a PBT exploit) is a fresh Train run that starts from ``tune.get_checkpoint()``.
    Each report reaches Tune with its metrics reduced across ranks and its checkpoint, which
    Tune copies into the trial folder (see ``raylab.train_bridge``).
    """
    import threading

    import ray
    import ray.train
    from ray import tune
    from ray.train.torch import TorchConfig, TorchTrainer

    from raylab.mailbox import DONE, Mailbox
    from raylab.train_bridge import ForwardToTrial

    # Ray Train's preemption watcher restarts a run after a node drains; retries go through
    # Tune here (max_preemption_failures=0), so the watcher would be one more actor to start.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    # The controller hands on reports and notices the end of the loop when it polls its
    # workers: every 2 s by default, which added about 10 s to a smoke sweep's trial.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    quiet_ray_train_info()
    trial_id = tune.get_context().get_trial_id()
    train_run = storage.join(settings["train_storage"], trial_id)  # before any ?query of the URI
    remove_folder(train_run)  # an earlier attempt's run: this one starts from the trial's checkpoint
    mailbox = Mailbox.remote()
    worker_settings = {**settings, "resume": tune.get_checkpoint()}
    trainer = TorchTrainer(
        functools.partial(run_trial, worker_settings, "train"),
        train_loop_config=config,
        torch_config=TorchConfig(
            backend=distributed_backend(settings["gpus_per_worker"])
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
            name=trial_id,
            storage_path=settings["train_storage"],
            callbacks=[ForwardToTrial(mailbox)],
            logging_config=ray.train.LoggingConfig(log_level="WARNING"),  # no per-step chatter
            # Tune keeps the trial's checkpoints; Ray Train only needs the one in transit.
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=1),
            # A worker group that cannot start yet (its node is still being added by the
            # autoscaler) is no failure of the loop: Ray Train retries the start, as by default.
            failure_config=ray.train.FailureConfig(
                max_failures=0, controller_failure_limit=-1, max_preemption_failures=0
            ),
        ),
    )
    failure: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as err:  # noqa: BLE001 - handed to the trial's thread below
            failure.append(err)
        finally:
            ray.get(mailbox.send.remote(DONE))

    gauges = TrialGauges(trial_id, settings["experiment"], settings["metric"])
    runner = threading.Thread(target=fit, name=f"train-run-{trial_id}", daemon=True)
    runner.start()
    while (item := ray.get(mailbox.receive.remote())) != DONE:
        metrics, checkpoint = item
        gauges.report(metrics)
        started = time.perf_counter()
        if checkpoint is not None:  # Tune copies it from Ray Train's storage into the trial folder
            checkpoint = tune.Checkpoint(path=checkpoint.path, filesystem=checkpoint.filesystem)
        tune.report(metrics, checkpoint=checkpoint)
        if checkpoint is not None:
            gauges.checkpoint(time.perf_counter() - started)
        mailbox.done.remote()
    mailbox.done.remote()
    runner.join()
    if failure:
        raise failure[0]
    remove_folder(train_run)  # its checkpoints are in the trial folder now


def remove_folder(uri: str) -> None:
    """Delete a folder on local or cloud storage if it is there."""
    import pyarrow.fs

    fs, path = storage.filesystem(uri)
    if fs.get_file_info(path).type == pyarrow.fs.FileType.Directory:
        fs.delete_dir(path)


def distributed_backend(gpus_per_worker: float, nccl_built: bool | None = None) -> str:
    """The torch.distributed backend of a trial's Train workers: nccl on GPUs, gloo otherwise.

    nccl needs a torch built with it (``nccl_built``, by default asked of this torch; every
    node runs the same image). A GPU resource with no CUDA torch behind it, as on a simulated
    cluster, gets gloo, and the loop trains on the CPU. Decided here, in the trial's driver,
    without a probe task: a task asking for a GPU from inside the trial's placement group
    fits none of its bundles, and outside it would wait for a GPU the trials hold.
    """
    if gpus_per_worker <= 0:
        return "gloo"
    if nccl_built is None:
        import torch.distributed

        nccl_built = torch.distributed.is_available() and torch.distributed.is_nccl_available()
    return "nccl" if nccl_built else "gloo"


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
            mark_trial_ended(run_path, tune.get_context().get_trial_id())

        request = {"CPU": resources.cpus_per_worker}
    else:
        settings |= {
            "workers": resources.workers,
            "cpus_per_worker": resources.cpus_per_worker,
            "gpus_per_worker": resources.gpus_per_worker,
            "train_storage": storage.join(run_path, RUN_INTERNAL, "train"),
        }
        def trainable(config):
            drive_train_run(settings, config)
            mark_trial_ended(run_path, tune.get_context().get_trial_id())

        request = driver_request()
    trainable.__name__ = experiment.workload
    return tune.with_resources(trainable, request)
