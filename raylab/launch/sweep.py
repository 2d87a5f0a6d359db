"""Running or resuming a sweep: run names, the run to resume, the Tuner and its scheduler.

Ray must be connected first (``raylab.launch.ray_start.connect``).
"""

from __future__ import annotations

import datetime
import os

from raylab import provenance, search_space, workloads, yaml_io
from raylab import storage as storage_paths
from raylab.errors import UserError
from raylab.experiment import Experiment, from_saved
from raylab.launch import config_writer
from raylab.launch import loggers as logger_callbacks
from raylab.launch import progress as progress_lines
from raylab.launch.checks import fitting_trials
from raylab.launch.scheduler import make_scheduler
from raylab.launch.trainable import make_trainable
from raylab.run_folder import EXPERIMENT_FILE, RunFolder, newest_run, trial_status


def default_run_name(experiment: Experiment) -> str:
    """``NAME[-smoke]-YYYYmmdd-HHMMSS``: new runs never mix with old ones."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{experiment.name}{'-smoke' if experiment.smoke else ''}-{stamp}"


def refuse_existing_run(run: RunFolder) -> None:
    """``--name`` of a run that exists would write a second sweep into its folder: refuse."""
    if run.exists():
        raise UserError(
            f"--name {run.name}: a run already exists at {run.location}; continue it with --resume, "
            f"or choose another name"
        )


def run_to_resume(storage: str, experiment_name: str, smoke: bool | None, name: str | None) -> RunFolder:
    """The run folder ``--resume`` continues: ``--name``, else the newest unfinished run.

    Without ``--name``, the runs of ``experiment_name`` under a local storage root that Tune
    can restore (``raylab.run_folder.newest_run``); ``smoke`` (True or False) keeps only smoke
    or only full runs, None keeps both. Finished runs are skipped.
    """
    if name:
        run = RunFolder.under(storage, name)
        if not run.restorable():
            raise UserError(f"--resume: no resumable sweep at {run.location}")
        return run
    if storage_paths.is_uri(storage):
        raise UserError("--resume with a cloud --storage needs --name (the run folder to resume)")
    root = storage_paths.root(storage)
    kind = {True: " smoke", False: " full", None: ""}[smoke]
    unfinished = newest_run(root, experiment_name, smoke=smoke,
                            keep=lambda run: not run.finished and run.restorable())
    if unfinished is not None:
        return unfinished
    newest = newest_run(root, experiment_name, smoke=smoke, keep=RunFolder.restorable)
    if newest is not None:
        raise UserError(f"--resume: every{kind} run of '{experiment_name}' in {root} has "
                        f"finished (newest: {newest.name}); nothing to resume")
    raise UserError(f"--resume: no resumable{kind} run of '{experiment_name}' in {root}")


def saved_experiment(run: RunFolder) -> Experiment:
    """The experiment a run folder was started with (its ``experiment.yaml``), local or cloud."""
    source = run.join(EXPERIMENT_FILE)
    text = run.read_text(EXPERIMENT_FILE)
    if text is None:
        raise UserError(f"--resume: {source} is missing; this folder was not started by raylab")
    return from_saved(yaml_io.loads(text, source), source)


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
    run: RunFolder | None = None,
    *,
    storage: str = "results",
    name: str | None = None,
    resume: bool = False,
    verbose: int = 1,
    loggers: list[str] = (),
    joined_cluster: bool = False,
    progress: bool = False,
):
    """Run (or resume) the sweep; return ``(ResultGrid, run_path, experiment)``.

    Ray must be connected (``connect``). ``run`` is the run folder, as the CLI resolved it
    (with ``resume``: the run to continue, and ``experiment`` its saved experiment); without
    it, the folder is ``name`` (or a new name) under ``storage``, or with ``resume`` the run
    ``run_to_resume`` finds. With ``resume`` the sweep continues: finished trials are kept,
    unfinished and errored ones resume from their checkpoints. On a ``joined_cluster`` every
    trial is queued at once (see ``max_concurrent_trials``). ``verbose`` is Ray Tune's own
    output; ``progress`` prints raylab's one line per trial update. A resumed run keeps the
    console settings it was started with (Ray restores its RunConfig).
    """
    import ray
    from ray import tune

    # Workloads report some metrics at their own cadence (evaluation every N steps), so not
    # every row carries the experiment's metric; schedulers skip such rows. That the metric is
    # reported at all is checked against the workload's declared metrics before the sweep.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    if resume:
        if run is None:
            run = run_to_resume(storage, experiment.name, experiment.smoke, name)
            experiment = saved_experiment(run)
        tuner = tune.Tuner.restore(
            run.location,
            trainable=make_trainable(experiment, run),
            resume_unfinished=True,
            resume_errored=True,
        )
        update_provenance(run, resumed=provenance.now())
        results = _fit(tuner, run)
        update_provenance(run, ended=provenance.now())
        return results, run.location, experiment

    if run is None:
        run = RunFolder.under(storage, name or default_run_name(experiment))
        if name:
            refuse_existing_run(run)
    max_concurrent = max_concurrent_trials(experiment, ray.cluster_resources(), joined_cluster)
    tuner = tune.Tuner(
        make_trainable(experiment, run),
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
            name=run.name,
            storage_path=run.storage_root,
            stop=dict(experiment.stop) or None,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=experiment.checkpoint.keep),
            failure_config=tune.FailureConfig(max_failures=experiment.failure.max_failures),
            callbacks=[config_writer.callback(experiment, run),
                       *logger_callbacks.callbacks(list(loggers), experiment.name, run)]
            + ([progress_lines.callback(experiment, run.location)] if progress else []),
            verbose=verbose,
        ),
    )
    saved = {**experiment.to_yaml_dict(),
             "provenance": {**provenance.of_workload(workloads.get(experiment.workload)), "command": "raylab.tune"}}
    run.write_text(EXPERIMENT_FILE, yaml_io.dumps(saved))
    results = _fit(tuner, run)
    update_provenance(run, ended=provenance.now())
    return results, run.location, experiment


def update_provenance(run: RunFolder, ended: str | None = None, resumed: str | None = None) -> None:
    """Record in the saved experiment when the sweep ended, or that it was resumed."""
    saved = run.experiment()
    if saved is None or not isinstance(saved.get("provenance"), dict):
        return
    record = saved["provenance"]
    if ended:
        record["ended"] = ended
    if resumed:
        record["resumed"] = [*record.get("resumed", []), resumed]
        record["ended"] = None
    run.write_text(EXPERIMENT_FILE, yaml_io.dumps(saved))


def ended_trials(run: RunFolder, results) -> frozenset[str]:
    """The ids of the trials whose last result lacks ``done`` but whose loop returned."""
    return frozenset(
        trial_id for r in results
        if not (r.metrics or {}).get("done") and (trial_id := (r.metrics or {}).get("trial_id"))
        and run.ended(trial_id)
    )


def _fit(tuner, run: RunFolder):
    """``tuner.fit()``, then the finished marker when every trial reached its end.

    A trial has ended when its last result says ``done`` or its loop returned
    (``ended_trials``); Tune's trial status does not tell (an interrupted sweep marks its
    stopped trials TERMINATED too).
    """
    results = tuner.fit()
    ended = ended_trials(run, results)
    if len(results) and all(
        trial_status(True, bool((r.metrics or {}).get("done")), r.error is not None,
                     (r.metrics or {}).get("trial_id") in ended) == "TERMINATED"
        for r in results
    ):
        run.mark_finished(len(results))
    return results
