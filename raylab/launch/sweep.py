"""Running or resuming a sweep over one run folder: the Tuner, its trainable and callbacks, the
trials that ended, and the end-of-sweep rows; the run ``--resume`` continues.

Ray must be connected first (``raylab.launch.ray_start.connect``). The caller resolves the run
folder once (``RunFolder.under(storage, experiment.new_run_name(...))``, or ``run_to_resume``) and checks it
(``raylab.launch.checks``); ``run`` does the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from raylab import provenance, workloads
from raylab.cluster.prices import failure_budget
from raylab.errors import UserError
from raylab.experiment import Experiment
from raylab.files import is_uri
from raylab.launch import config_writer, disk_full, searcher, summary
from raylab.launch import progress as progress_lines
from raylab.launch.checks import fitting_trials
from raylab.launch.scheduler import make_scheduler
from raylab.launch.trackers import logger_option
from raylab.launch.trainable import make_trainable
from raylab.run_folder import TUNE_RUN, RunFolder, newest_run, root


@dataclass(frozen=True)
class SweepResult:
    """What a sweep (or its resumption) ended with."""

    results: Any
    """Ray Tune's ``ResultGrid``: each trial's last result, its history and its error."""
    ended: frozenset[str]
    """The ids of the trials whose loop returned though their last result lacks ``done``
    (``ended_trials``)."""
    rows: list[dict[str, Any]]
    """The end-of-sweep table (``raylab.launch.summary.rows``): one row per trial with its
    status, swept values, the metric's last and best value and every reported metric's last."""
    best: dict[str, Any] | None = None
    """The best trial (``raylab.launch.summary.best_trial``), as ``best.yaml`` holds it."""

    @property
    def unfinished(self) -> int:
        """Trials that neither terminated nor failed (the sweep was interrupted)."""
        return sum(row["status"] not in ("TERMINATED", "ERROR") for row in self.rows)

    @property
    def failed(self) -> list[str]:
        return [row["trial"] for row in self.rows if row["status"] == "ERROR"]


def run(
    experiment: Experiment,
    run: RunFolder,
    *,
    resume: bool = False,
    verbose: int = 1,
    loggers: list[str] = (),
    joined_cluster: bool = False,
    progress: bool = False,
    notes: str = "",
    tags: tuple[str, ...] = (),
) -> SweepResult:
    """Run the sweep of ``experiment`` in the run folder ``run``, or with ``resume`` continue the
    sweep there (``experiment`` is then the one the run saved: ``raylab.experiment.from_run``).

    A new run writes ``experiment.yaml`` with its provenance first (``Experiment.write_to``); a
    resumed one records the resumption. Resuming keeps finished trials, and unfinished and
    errored ones continue from their checkpoints. On a ``joined_cluster`` every trial is queued
    at once (``max_concurrent_trials``). ``verbose`` is Ray Tune's own output; ``progress``
    prints raylab's one line per trial update; ``loggers`` adds Tune's logger callbacks (names
    checked by ``raylab.launch.trackers.logger_option.check``). A resumed run keeps the console settings it
    was started with (Ray restores its RunConfig). ``notes`` and ``tags`` go into a new run's
    provenance (and from there to the trackers). The best trial is written to ``best.yaml``.
    """
    import ray
    from ray import tune

    # Workloads report some metrics at their own cadence (evaluation every N steps), so not
    # every row carries the experiment's metric; schedulers skip such rows. That the metric is
    # reported at all is checked against the workload's declared metrics before the sweep.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    if resume:
        tuner = tune.Tuner.restore(
            run.location,
            trainable=make_trainable(experiment, run),
            resume_unfinished=True,
            resume_errored=True,
        )
        run.record(resumed=provenance.now())
    else:
        tuner = tune.Tuner(
            make_trainable(experiment, run),
            param_space=searcher.param_space(experiment),
            tune_config=tune.TuneConfig(
                metric=experiment.metric,
                mode=experiment.mode,
                search_alg=searcher.make_searcher(experiment),
                scheduler=make_scheduler(experiment),
                num_samples=experiment.num_samples,
                time_budget_s=experiment.time_budget_s or None,
                trial_dirname_creator=searcher.dirname_creator(experiment),
                max_concurrent_trials=max_concurrent_trials(experiment, ray.cluster_resources(), joined_cluster),
                reuse_actors=not experiment.resources.uses_ray_train,
            ),
            run_config=tune.RunConfig(
                name=run.name,
                storage_path=run.storage_root,
                stop=dict(experiment.stop) or None,
                checkpoint_config=tune.CheckpointConfig(num_to_keep=experiment.checkpoint.keep),
                # spot trials: the file's budget plus what their reclaims may use (raylab.cluster.prices.failure_budget)
                failure_config=tune.FailureConfig(max_failures=failure_budget(experiment)[0]),
                callbacks=[
                    disk_full.callback(run.location),
                    config_writer.callback(experiment, run),
                    *logger_option.callbacks(list(loggers), experiment, run),
                ]
                + ([progress_lines.callback(experiment, run.location)] if progress else []),
                verbose=verbose,
            ),
        )
        experiment.write_to(run, TUNE_RUN, notes=notes, tags=tags)
    try:
        results = tuner.fit()
    except disk_full.DiskFull:
        raise
    except Exception as err:  # a write of the driver's own (Tune's state) on a full disk
        if disk_full.is_disk_full(err):
            raise disk_full.DiskFull(disk_full.message(run.location, str(err))) from None
        raise
    ended = ended_trials(run, results)
    rows = summary.rows(
        results,
        experiment.metric,
        experiment.mode,
        list(experiment.search),
        ended=ended,
        reported=workloads.get(experiment.workload).metrics,
    )
    best = summary.best_trial(results, rows, experiment.metric, experiment.mode, run)
    if best is not None:
        run.write_best(best)
    if rows and all(row["status"] == "TERMINATED" for row in rows):
        run.mark_finished(len(rows))
    run.record(ended=provenance.now())
    return SweepResult(results=results, ended=ended, rows=rows, best=best)


def ended_trials(run: RunFolder, results) -> frozenset[str]:
    """The ids of the trials whose last result lacks ``done`` but whose loop returned.

    A trial has ended when its last result says ``done`` or its loop returned (its marker:
    ``RunFolder.mark_ended``); Tune's trial status does not tell (an interrupted sweep marks
    its stopped trials TERMINATED too).
    """
    return frozenset(
        trial_id
        for r in results
        if not (r.metrics or {}).get("done") and (trial_id := (r.metrics or {}).get("trial_id")) and run.ended(trial_id)
    )


def max_concurrent_trials(experiment: Experiment, available: dict[str, float], joined_cluster: bool) -> int | None:
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


def run_to_resume(storage: str, experiment_name: str, smoke: bool | None, name: str | None) -> RunFolder:
    """The run folder ``--resume`` continues: ``--name``, else the newest unfinished run.

    Without ``--name``, the runs of ``experiment_name`` under a local storage root that Tune
    can restore (``raylab.run_folder.newest_run``); ``smoke`` (True or False) keeps only smoke
    or only full runs, None keeps both. Finished runs are skipped.
    """
    if name:
        run = RunFolder.under(storage, name)
        if not restorable(run):
            raise UserError(f"--resume: no resumable sweep at {run.location}")
        return run
    if is_uri(storage):
        raise UserError("--resume with a cloud --storage needs --name (the run folder to resume)")
    where = root(storage)
    kind = {True: " smoke", False: " full", None: ""}[smoke]
    unfinished = newest_run(where, experiment_name, smoke=smoke, keep=lambda run: not run.finished and restorable(run))
    if unfinished is not None:
        return unfinished
    newest = newest_run(where, experiment_name, smoke=smoke, keep=restorable)
    if newest is not None:
        raise UserError(
            f"--resume: every{kind} run of '{experiment_name}' in {where} has "
            f"finished (newest: {newest.name}); nothing to resume"
        )
    raise UserError(f"--resume: no resumable{kind} run of '{experiment_name}' in {where}")


def restorable(run: RunFolder) -> bool:
    """Whether Tune can restore the sweep in ``run``: its Tuner state (``Tuner.can_restore``) and
    at least one experiment state file, which ``Tuner.restore`` also needs (a sweep that
    stopped before its first trial started has the one and not the other)."""
    from ray import tune

    if not tune.Tuner.can_restore(run.location):
        return False
    return any(
        name.startswith("experiment_state-") and name.endswith(".json")
        for name, kind in run.listdir()
        if kind == "file"
    )
