"""The Tune callbacks of ``--logger mlflow|wandb|tensorboard``: each trial's resolved Config,
the run's provenance and its results, stepped by the workload's own counter
(``raylab.launch.trackers.payload``).

Each is a ``ray.tune.logger.LoggerCallback`` on the driver that talks to its tool through the
tool's public client: ``mlflow.tracking.MlflowClient``, ``wandb.init(reinit="create_new")``
(one W&B run per trial, side by side in the driver), ``tensorboardX.SummaryWriter``. Their
heavy state is made in ``setup`` (Tune pickles the callbacks with the sweep and restores them
on ``--resume``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from ray.tune.logger import LoggerCallback, TBXLoggerCallback

from raylab.experiment import Experiment
from raylab.launch import config_writer
from raylab.launch.trackers import payload
from raylab.run_folder import RunFolder


class _Trials:
    """What the three callbacks share: the experiment, its run folder, the step key, and for
    each trial its flat params and last step."""

    def __init__(self, experiment: Experiment, run: RunFolder):
        self.experiment = experiment
        self.run = run
        self.step_key = payload.step_key(experiment)

    def provenance(self) -> dict[str, Any]:
        """The run's provenance as flat ``raylab.*`` fields (read from ``experiment.yaml``, which
        the sweep writes before Tune calls ``setup``)."""
        return payload.provenance_fields(self.saved_provenance())

    def saved_provenance(self) -> dict[str, Any] | None:
        saved = self.run.experiment() or {}
        return saved.get("provenance") if isinstance(saved.get("provenance"), dict) else None

    def notes_and_tags(self) -> tuple[str, list[str]]:
        """The run's ``--notes`` and ``--tag`` values (MLflow's note, W&B's notes and tags)."""
        return payload.notes_and_tags(self.saved_provenance())

    def params(self, trial) -> dict[str, Any]:
        return payload.params(config_writer.resolve(self.experiment, trial.config))


# MLflow's system tags (https://mlflow.org/docs/latest/ml/tracking/tracking-api/#system-tags).
MLFLOW_GIT_COMMIT = "mlflow.source.git.commit"
MLFLOW_SOURCE_NAME = "mlflow.source.name"
MLFLOW_SOURCE_TYPE = "mlflow.source.type"
MLFLOW_NOTE = "mlflow.note.content"
MLFLOW_RUN_NAME = "mlflow.runName"


class MLflowTracker(LoggerCallback):
    """One MLflow run per trial in the experiment ``experiment_name``: every Config field a
    param, provenance as tags (``mlflow.source.git.commit``, ``mlflow.source.name`` = the command
    line, and ``raylab.git.dirty``, ``raylab.versions.*``...), metrics stepped by the counter.
    A resumed sweep continues a trial's run (found by its ``raylab.trial`` and ``raylab.run`` tags)."""

    def __init__(self, tracking_uri: str, experiment_name: str, experiment: Experiment, run: RunFolder, tags=None):
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.tags = dict(tags or {})
        self._trials = _Trials(experiment, run)
        self._runs: dict[str, str] = {}
        self._steps: dict[str, int] = {}

    def setup(self, *args, **kwargs):
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=self.tracking_uri)
        found = self._client.get_experiment_by_name(self.experiment_name)
        if found is None:
            try:
                self._experiment_id = self._client.create_experiment(self.experiment_name)
            except MlflowException:  # another sweep created it meanwhile
                self._experiment_id = self._client.get_experiment_by_name(self.experiment_name).experiment_id
        else:
            self._experiment_id = found.experiment_id
        provenance = self._trials.provenance()
        self._run_tags = {
            **{key: str(value) for key, value in provenance.items()},
            MLFLOW_SOURCE_TYPE: "LOCAL",
            **self.tags,
        }
        if "raylab.git.commit" in provenance:
            self._run_tags[MLFLOW_GIT_COMMIT] = provenance["raylab.git.commit"]
        if "raylab.command_line" in provenance:
            self._run_tags[MLFLOW_SOURCE_NAME] = provenance["raylab.command_line"]
        notes, _ = self._trials.notes_and_tags()
        if notes:  # the run's description in MLflow's UI
            self._run_tags[MLFLOW_NOTE] = notes
        self._runs, self._steps = {}, {}

    def _run_id(self, trial) -> str:
        if trial.trial_id in self._runs:
            return self._runs[trial.trial_id]
        from mlflow.exceptions import MlflowException

        run_tag = self.tags.get("raylab.run", "")
        try:
            existing = self._client.search_runs(
                [self._experiment_id],
                filter_string=f"tags.`raylab.trial` = '{trial.trial_id}' and tags.`raylab.run` = '{run_tag}'",
                max_results=1,
            )
        except MlflowException:  # a run name MLflow's filter cannot quote: a new run
            existing = []
        if existing:
            run_id = existing[0].info.run_id
            self._client.update_run(run_id, status="RUNNING")
        else:
            tags = {
                **self._run_tags,
                "raylab.trial": trial.trial_id,
                "trial_name": str(trial),
                MLFLOW_RUN_NAME: str(trial),
            }
            run_id = self._client.create_run(self._experiment_id, run_name=str(trial), tags=tags).info.run_id
            self._log_params(run_id, self._trials.params(trial))
        self._runs[trial.trial_id] = run_id
        return run_id

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(key, str(value)[:6000]) for key, value in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self._client.log_batch(run_id, params=items[start : start + 100])

    def log_trial_start(self, trial):
        self._run_id(trial)

    def log_trial_result(self, iteration: int, trial, result: dict):
        from mlflow.entities import Metric

        run_id = self._run_id(trial)
        step = payload.step_of(result, self._trials.step_key, self._steps.get(trial.trial_id))
        self._steps[trial.trial_id] = step
        now = int(time.time() * 1000)
        items = [Metric(key, value, now, step) for key, value in payload.metrics(result).items()]
        for start in range(0, len(items), 1000):
            self._client.log_batch(run_id, metrics=items[start : start + 1000])

    def log_trial_end(self, trial, failed: bool = False):
        run_id = self._run_id(trial)
        self._client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")
        self._runs.pop(trial.trial_id, None)


class WandbTracker(LoggerCallback):
    """One W&B run per trial (id: the trial id) in ``project``, grouped by the run name: the
    config holds every Config field (dotted keys) and the provenance's ``raylab.*`` fields; W&B's
    own git commit setting gets the code's commit (W&B records the program and its arguments
    itself, the driver being the process that started the sweep); every metric is charted
    against the counter (``define_metric(..., step_metric=...)``)."""

    def __init__(self, project: str, group: str, experiment: Experiment, run: RunFolder, **init):
        self.project = project
        self.group = group
        self.init = init
        self._trials = _Trials(experiment, run)
        self._runs: dict[str, Any] = {}

    def setup(self, *args, **kwargs):
        self._provenance = self._trials.provenance()
        self._notes, self._tags = self._trials.notes_and_tags()
        self._runs = {}

    def _run(self, trial):
        if trial.trial_id in self._runs:
            return self._runs[trial.trial_id]
        import wandb

        # The driver's console is raylab's: no console capture, and W&B's own lines (per run:
        # where its data goes, how to sync) only with WANDB_SILENT=false.
        settings = {"console": "off", "silent": os.environ.get("WANDB_SILENT", "true").lower() != "false"}
        if "raylab.git.commit" in self._provenance:
            settings["git_commit"] = self._provenance["raylab.git.commit"]
        offline = self.init.get("mode", "").lower() in ("offline", "dryrun", "disabled")
        run = wandb.init(
            project=self.project,
            group=self.group,
            id=trial.trial_id,
            name=str(trial),
            config={**self._trials.params(trial), **self._provenance},
            **({"notes": self._notes} if self._notes else {}),
            **({"tags": self._tags} if self._tags else {}),
            reinit="create_new",
            **({} if offline else {"resume": "allow"}),
            settings=wandb.Settings(**settings),
            **self.init,
        )
        step_key = self._trials.step_key
        run.define_metric(step_key)
        run.define_metric("*", step_metric=step_key)
        self._runs[trial.trial_id] = run
        return run

    def log_trial_start(self, trial):
        self._run(trial)

    def log_trial_result(self, iteration: int, trial, result: dict):
        self._run(trial).log(payload.metrics(result))

    def log_trial_end(self, trial, failed: bool = False):
        run = self._runs.pop(trial.trial_id, None)
        if run is not None:
            run.finish(exit_code=1 if failed else 0)

    def on_experiment_end(self, trials, **info):
        for trial_id in list(self._runs):
            self._runs.pop(trial_id).finish()


class TensorBoardTracker(TBXLoggerCallback):
    """TensorBoard events in each trial's folder: every metric stepped by the counter, the
    Config's fields and the final metrics in the hparams plugin (``add_hparams``), and the
    provenance as text. A ``TBXLoggerCallback`` (so Tune adds no second one of its own) that
    keeps its own writers."""

    def __init__(self, experiment: Experiment, run: RunFolder):
        self._trials = _Trials(experiment, run)
        self._writers: dict[str, Any] = {}
        self._steps: dict[str, int] = {}
        self._last: dict[str, dict[str, float]] = {}

    def setup(self, *args, **kwargs):
        self._provenance = self._trials.provenance()
        self._writers, self._steps, self._last = {}, {}, {}

    def _writer(self, trial):
        if trial.trial_id not in self._writers:
            from tensorboardX import SummaryWriter

            writer = SummaryWriter(logdir=trial.local_path, flush_secs=30)
            if self._provenance:
                text = "\n\n".join(f"`{key}`: {value}" for key, value in self._provenance.items())
                writer.add_text("raylab/provenance", text, 0)
            self._writers[trial.trial_id] = writer
        return self._writers[trial.trial_id]

    def log_trial_start(self, trial):
        self._writer(trial)

    def log_trial_result(self, iteration: int, trial, result: dict):
        writer = self._writer(trial)
        step = payload.step_of(result, self._trials.step_key, self._steps.get(trial.trial_id))
        self._steps[trial.trial_id] = step
        values = payload.metrics(result)
        for key, value in values.items():
            writer.add_scalar(key, value, global_step=step)
        self._last.setdefault(trial.trial_id, {}).update(values)
        writer.flush()

    def log_trial_end(self, trial, failed: bool = False):
        writer = self._writer(trial)
        hparams = {key: payload.scalar(value) for key, value in self._trials.params(trial).items()}
        last = self._last.pop(trial.trial_id, {})
        metric = self._trials.experiment.metric
        final = {f"hparam/{metric}": last[metric]} if metric in last else {}
        writer.add_hparams(hparams, final, name="hparams", global_step=self._steps.get(trial.trial_id))
        writer.close()
        self._writers.pop(trial.trial_id, None)
