"""Running or resuming a sweep: run names, the run to resume, the Tuner.

Ray must be connected first (``raylab.ray_start.connect``).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from raylab import provenance, search_space, workloads, yaml_io
from raylab import storage as storage_paths
from raylab.checks import fitting_trials
from raylab.errors import UserError
from raylab.experiment import Experiment, from_saved
from raylab.loggers import callbacks as logger_callbacks
from raylab.run_files import (
    EXPERIMENT_FILE, FINISHED_FILE, read_text, resolved_config_callback, run_exists, trial_ended,
    write_text,
)
from raylab.progress import callback as progress_callback
from raylab.schedulers import make_scheduler
from raylab.trainables import make_trainable


def default_run_name(experiment: Experiment) -> str:
    """``NAME[-smoke]-YYYYmmdd-HHMMSS``: new runs never mix with old ones."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{experiment.name}{'-smoke' if experiment.smoke else ''}-{stamp}"


def storage_root(storage: str) -> str:
    """``--storage`` as an absolute path, or the URI as given."""
    return storage_paths.root(storage)


def run_path_of(storage: str, name: str) -> str:
    """The run folder ``name`` under the storage root (a path or a URI, query kept last)."""
    return storage_paths.join(storage, name)


def refuse_existing_run(storage: str, name: str) -> None:
    """``--name`` of a run that exists would write a second sweep into its folder: refuse."""
    path = run_path_of(storage, name)
    if run_exists(path):
        raise UserError(
            f"--name {name}: a run already exists at {path}; continue it with --resume, "
            f"or choose another name"
        )


def is_finished(run_path: str) -> bool:
    """Whether every trial of the run terminated (its sweep wrote the finished marker)."""
    return read_text(run_path, FINISHED_FILE) is not None


def find_run_to_resume(
    storage: str, experiment_name: str, smoke: bool | None, name: str | None
) -> str:
    """The run folder ``--resume`` continues: ``--name``, else the newest unfinished run.

    Without ``--name``, the runs of ``experiment_name`` in a local storage root are those whose
    saved ``experiment.yaml`` names it and that Tune can restore; ``smoke`` (True or False)
    keeps only smoke or only full runs, None keeps both. Finished runs are skipped.
    """
    if name:
        path = run_path_of(storage, name)
        if not restorable(path):
            raise UserError(f"--resume: no resumable sweep at {path}")
        return path
    if storage_paths.is_uri(storage):
        raise UserError("--resume with a cloud --storage needs --name (the run folder to resume)")
    root = Path(storage)
    runs = []
    for saved in root.glob(f"*/{EXPERIMENT_FILE}") if root.is_dir() else []:
        try:
            raw = yaml_io.load(saved)
        except UserError:
            continue
        if not isinstance(raw, dict) or raw.get("name") != experiment_name:
            continue
        if smoke is not None and bool(raw.get("smoke")) != smoke:
            continue
        if restorable(str(saved.parent)):
            runs.append(saved.parent)
    runs.sort(key=lambda run: (run / EXPERIMENT_FILE).stat().st_mtime, reverse=True)
    unfinished = [run for run in runs if not is_finished(str(run))]
    kind = {True: " smoke", False: " full", None: ""}[smoke]
    if not unfinished:
        if runs:
            raise UserError(f"--resume: every{kind} run of '{experiment_name}' in {root} has "
                            f"finished (newest: {runs[0].name}); nothing to resume")
        raise UserError(f"--resume: no resumable{kind} run of '{experiment_name}' in {root}")
    return str(unfinished[0])


def restorable(run_path: str) -> bool:
    """Whether Tune can restore the sweep in ``run_path``: its Tuner state (``Tuner.can_restore``)
    and at least one experiment state file, which ``Tuner.restore`` also needs (a sweep that
    stopped before its first trial started has the one and not the other)."""
    import pyarrow.fs
    from ray import tune

    if not tune.Tuner.can_restore(run_path):
        return False
    fs, path = storage_paths.filesystem(run_path)
    found = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
    return any(info.base_name.startswith("experiment_state-") and info.base_name.endswith(".json")
               for info in found)


def saved_experiment(run_path: str) -> Experiment:
    """The experiment a run folder was started with (its ``experiment.yaml``), local or cloud."""
    source = storage_paths.join(run_path, EXPERIMENT_FILE)
    text = read_text(run_path, EXPERIMENT_FILE)
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
    storage: str = "results",
    name: str | None = None,
    resume: bool = False,
    verbose: int = 1,
    loggers: list[str] = (),
    joined_cluster: bool = False,
    progress: bool = False,
):
    """Run (or resume) the sweep; return ``(ResultGrid, run_path, experiment)``.

    Ray must be connected (``connect``). With ``resume``, the run folder's saved experiment is
    used and the sweep continues: finished trials are kept, unfinished and errored ones resume
    from their checkpoints. On a ``joined_cluster`` every trial is queued at once (see
    ``max_concurrent_trials``). ``verbose`` is Ray Tune's own output; ``progress`` prints
    raylab's one line per trial update. A resumed run keeps the console settings it was
    started with (Ray restores its RunConfig).
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
        experiment = saved_experiment(run_path)
        tuner = tune.Tuner.restore(
            run_path,
            trainable=make_trainable(experiment, run_path),
            resume_unfinished=True,
            resume_errored=True,
        )
        update_provenance(run_path, resumed=provenance.now())
        results = _fit(tuner, run_path)
        update_provenance(run_path, ended=provenance.now())
        return results, run_path, experiment

    run_name = name or default_run_name(experiment)
    if name:
        refuse_existing_run(storage_uri, name)
    run_path = run_path_of(storage_uri, run_name)
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
                       *logger_callbacks(list(loggers), experiment.name, run_path)]
            + ([progress_callback(experiment, run_path)] if progress else []),
            verbose=verbose,
        ),
    )
    saved = {**experiment.to_yaml_dict(),
             "provenance": provenance.of_workload(workloads.get(experiment.workload))}
    write_text(run_path, EXPERIMENT_FILE, yaml_io.dumps(saved))
    results = _fit(tuner, run_path)
    update_provenance(run_path, ended=provenance.now())
    return results, run_path, experiment


def update_provenance(run_path: str, ended: str | None = None, resumed: str | None = None) -> None:
    """Record in the saved experiment when the sweep ended, or that it was resumed."""
    text = read_text(run_path, EXPERIMENT_FILE)
    saved = yaml_io.loads(text, EXPERIMENT_FILE) if text else None
    if not isinstance(saved, dict) or not isinstance(saved.get("provenance"), dict):
        return
    record = saved["provenance"]
    if ended:
        record["ended"] = ended
    if resumed:
        record["resumed"] = [*record.get("resumed", []), resumed]
        record["ended"] = None
    write_text(run_path, EXPERIMENT_FILE, yaml_io.dumps(saved))


def ended_trials(run_path: str, results) -> frozenset[str]:
    """The ids of the trials whose last result lacks ``done`` but whose loop returned."""
    return frozenset(
        trial_id for r in results
        if not (r.metrics or {}).get("done") and (trial_id := (r.metrics or {}).get("trial_id"))
        and trial_ended(run_path, trial_id)
    )


def _fit(tuner, run_path: str):
    """``tuner.fit()``, then the finished marker when every trial reached its end.

    A trial has ended when its last result says ``done`` or its loop returned
    (``ended_trials``); Tune's trial status does not tell (an interrupted sweep marks its
    stopped trials TERMINATED too).
    """
    results = tuner.fit()
    ended = ended_trials(run_path, results)
    metrics = [r.metrics or {} for r in results]
    if len(results) and all(
        r.error is None and (m.get("done") or m.get("trial_id") in ended) for r, m in zip(results, metrics)
    ):
        write_text(run_path, FINISHED_FILE, yaml_io.dumps({"trials": len(results)}))
    return results
