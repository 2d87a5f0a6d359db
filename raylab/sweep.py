"""Running or resuming a sweep: run names, the run to resume, the Tuner.

Ray must be connected first (``raylab.ray_start.connect``).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from raylab import search_space, yaml_io
from raylab import storage as storage_paths
from raylab.checks import fitting_trials
from raylab.errors import UserError
from raylab.experiment import Experiment, validate
from raylab.loggers import callbacks as logger_callbacks
from raylab.run_files import EXPERIMENT_FILE, resolved_config_callback, write_text
from raylab.schedulers import make_scheduler
from raylab.trainables import make_trainable


def default_run_name(experiment: Experiment) -> str:
    """``NAME[-smoke]-YYYYmmdd-HHMMSS``: new runs never mix with old ones."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{experiment.name}{'-smoke' if experiment.smoke else ''}-{stamp}"


def storage_root(storage: str) -> str:
    """``--storage`` as an absolute path, or the URI as given."""
    return storage_paths.root(storage)


def find_run_to_resume(storage: str, experiment_name: str, smoke: bool, name: str | None) -> str:
    """The run folder ``--resume`` continues: ``--name``, else the newest run of the experiment."""
    from ray import tune

    if name:
        path = storage_paths.join(storage, name)
        if not tune.Tuner.can_restore(path):
            raise UserError(f"--resume: no resumable sweep at {path}")
        return path
    if "://" in storage:
        raise UserError("--resume with a cloud --storage needs --name (the run folder to resume)")
    prefix = f"{experiment_name}{'-smoke' if smoke else ''}-"
    root = Path(storage)
    runs = sorted(
        (p for p in root.glob(f"{prefix}*") if p.name[len(prefix):][:8].isdigit()),
        key=lambda p: p.name,
        reverse=True,
    ) if root.is_dir() else []
    for run in runs:
        if tune.Tuner.can_restore(str(run.absolute())):
            return str(run.absolute())
    raise UserError(f"--resume: no resumable run of '{prefix[:-1]}' in {root.absolute()}")


def saved_experiment(run_path: str) -> Experiment:
    """The experiment a run folder was started with (its ``experiment.yaml``)."""
    path = Path(run_path) / EXPERIMENT_FILE
    raw = yaml_io.load(path)
    name, smoke = raw.pop("name"), raw.pop("smoke")
    raw.pop("source", None)
    return validate(raw, name=name, source=str(path), smoke=smoke)


def max_concurrent_trials(
    experiment: Experiment, available: dict[str, float], joined_cluster: bool
) -> int | None:
    """How many trials Tune may run at once (``None``: no limit, every trial queued).

    The experiment's ``max_concurrent_trials`` wins when set. On a joined cluster, which may
    autoscale, every trial is queued, so that the autoscaler sees the whole demand and adds
    nodes for it (the cluster's ``max_workers`` caps the cost); a Ray Train trial that finds
    no room waits, retrying its worker group's start. On a local Ray, a Ray Train trial's
    driver holds no CPU, so without a limit every trial would start its workers at once:
    the limit is then what fits on this machine.
    """
    if experiment.max_concurrent_trials:
        return experiment.max_concurrent_trials
    if joined_cluster or not experiment.resources.uses_ray_train:
        return None
    return fitting_trials(experiment, available)


def sweep(
    experiment: Experiment,
    storage: str = "results",
    name: str | None = None,
    resume: bool = False,
    verbose: int = 1,
    loggers: list[str] = (),
    joined_cluster: bool = False,
):
    """Run (or resume) the sweep; return ``(ResultGrid, run_path, experiment)``.

    Ray must be connected (``connect``). With ``resume``, the run folder's saved experiment is
    used and the sweep continues: finished trials are kept, unfinished and errored ones resume
    from their checkpoints. On a ``joined_cluster`` every trial is queued at once (see
    ``max_concurrent_trials``).
    """
    import ray
    from ray import tune

    # Workloads report some metrics at their own cadence (evaluation every N steps), so not
    # every row carries the experiment's metric; schedulers skip such rows. That the metric is
    # reported at all is checked against the workload's declared metrics before the sweep.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    storage_uri = storage_root(storage)
    if resume:
        run_path = find_run_to_resume(storage_uri, experiment.name, experiment.smoke, name)
        experiment = saved_experiment(run_path) if "://" not in run_path else experiment
        tuner = tune.Tuner.restore(
            run_path,
            trainable=make_trainable(experiment, run_path),
            resume_unfinished=True,
            resume_errored=True,
        )
        return tuner.fit(), run_path, experiment

    run_name = name or default_run_name(experiment)
    run_path = storage_paths.join(storage_uri, run_name)
    max_concurrent = max_concurrent_trials(experiment, ray.cluster_resources(), joined_cluster)
    tuner = tune.Tuner(
        make_trainable(experiment, run_path),
        param_space={**experiment.config, **search_space.to_tune(experiment.search)},
        tune_config=tune.TuneConfig(
            metric=experiment.metric,
            mode=experiment.mode,
            scheduler=make_scheduler(experiment),
            num_samples=experiment.num_samples,
            max_concurrent_trials=max_concurrent,
            reuse_actors=not experiment.resources.uses_ray_train,
        ),
        run_config=tune.RunConfig(
            name=run_name,
            storage_path=storage_uri,
            stop=dict(experiment.stop) or None,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=experiment.checkpoint.keep),
            failure_config=tune.FailureConfig(max_failures=experiment.failure.max_failures),
            callbacks=[resolved_config_callback(experiment, run_path),
                       *logger_callbacks(list(loggers), experiment.name, run_path)],
            verbose=verbose,
        ),
    )
    write_text(run_path, EXPERIMENT_FILE, yaml_io.dumps(experiment.to_yaml_dict()))
    return tuner.fit(), run_path, experiment
