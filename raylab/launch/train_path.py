"""The Ray Train path of a trial: a Tune function that drives a Ray Train run of the loop.

Trials of several workers run here (``raylab.launch.trainable`` chooses; the Tune path runs a
single-worker trial's loop, GPU or not, in the trial itself). The Tune trial's function starts a Ray Train ``TorchTrainer`` (Ray Train v2) whose
workers run the workload's loop. Ray Train calls ``ForwardToTrial.after_report`` on its
controller with every rank's metrics and the checkpoint it just stored. The callback reduces
the metrics across ranks and hands both to the trial's driver through a
``raylab.launch.mailbox.Mailbox`` actor, then waits until the driver has passed them to Tune with
``tune.report(metrics, checkpoint=...)``: Tune copies the checkpoint into the trial folder, so
PBT can exploit it, ``--resume`` and downstream steps find it where they find a plain Tune
trial's, and Ray Train may prune its own copy.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
from typing import Any

import ray
import ray.train

from raylab.launch.gauges import TrialGauges
from raylab.launch.mailbox import DONE, Mailbox
from raylab.launch.ranks import reduce_across_ranks
from raylab.launch.trial import TrialSettings, quiet_ray_train_info, run_trial
from raylab.run_folder import RunFolder, join


class ForwardToTrial(ray.train.UserCallback):
    """Runs on the Train controller: each report's rank-reduced metrics and checkpoint to the trial."""

    def __init__(self, mailbox):
        self._mailbox = mailbox

    def after_report(self, run_context, metrics: list[dict[str, Any]], checkpoint):
        ray.get(self._mailbox.send.remote((reduce_across_ranks(metrics), checkpoint)))


def drive_train_run(settings: TrialSettings, config: dict[str, Any]) -> None:
    """A Tune trial that runs the loop on Ray Train workers (several workers).

    One retry budget: the Train run itself never retries a failure of its workers
    (``FailureConfig(max_failures=0)``), so a failed worker fails the Tune trial, which Tune
    restarts up to the experiment's ``failure.max_failures`` times from the trial's latest
    checkpoint. Each attempt (and each
    restart after a PBT exploit) is a fresh Train run that starts from ``tune.get_checkpoint()``.
    Each report reaches Tune with its metrics reduced across ranks and its checkpoint, which
    Tune copies into the trial folder (see ``ForwardToTrial``).
    """
    from ray import tune
    from ray.train.torch import TorchConfig, TorchTrainer

    # Ray Train's preemption watcher restarts a run after a node drains; retries go through
    # Tune here (max_preemption_failures=0), so the watcher would be one more actor to start.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    # The controller hands on reports and notices the end of the loop when it polls its
    # workers: every 2 s by default, which added about 10 s to a smoke sweep's trial.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    quiet_ray_train_info()
    trial_id = tune.get_context().get_trial_id()
    train_run = join(settings.train_storage, trial_id)  # before any ?query of the URI
    RunFolder(train_run).remove("")  # an earlier attempt's run: this one starts from the trial's checkpoint
    mailbox = Mailbox.remote()
    worker_settings = dataclasses.replace(settings, resume=tune.get_checkpoint())
    trainer = TorchTrainer(
        functools.partial(run_trial, worker_settings, "train"),
        train_loop_config=config,
        torch_config=TorchConfig(backend=distributed_backend(settings.gpus_per_worker)),
        scaling_config=ray.train.ScalingConfig(
            num_workers=settings.workers,
            use_gpu=settings.gpus_per_worker > 0,
            resources_per_worker=dict(settings.worker_request),
        ),
        run_config=ray.train.RunConfig(
            name=trial_id,
            storage_path=settings.train_storage,
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

    gauges = TrialGauges(trial_id, settings.experiment, settings.metric)
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
    RunFolder(train_run).remove("")  # its checkpoints are in the trial folder now


def distributed_backend(gpus_per_worker: float, nccl_built: bool | None = None) -> str:
    """The torch.distributed backend of a trial's Train workers: nccl on GPUs, gloo otherwise.

    nccl needs a torch built with it (``nccl_built``, by default asked of this torch; every
    node runs the same image). A GPU resource with no CUDA torch behind it, as on a simulated
    cluster, gets gloo, and the loop trains on the CPU; so does a simulated cluster whose
    torch is a CUDA build (``RAYLAB_SIMULATED_GPUS=1``: its GPUs are labels, and NCCL would
    find none). Decided here, in the trial's driver, without a probe task: a task asking for a
    GPU from inside the trial's placement group fits none of its bundles, and outside it
    would wait for a GPU the trials hold.
    """
    if gpus_per_worker <= 0 or os.environ.get("RAYLAB_SIMULATED_GPUS") == "1":
        return "gloo"
    if nccl_built is None:
        import torch.distributed

        nccl_built = torch.distributed.is_available() and torch.distributed.is_nccl_available()
    return "nccl" if nccl_built else "gloo"
