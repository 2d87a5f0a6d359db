"""A Tune callback that writes each trial's full config (the workload's defaults filled in) into
its trial folder as it starts, so a reader sees every value the trial ran with."""

from __future__ import annotations

from raylab import search_space, storage, workloads, yaml_io
from raylab.config import from_dict, to_dict
from raylab.experiment import Experiment
from raylab.run_folder import RunFolder


def callback(experiment: Experiment, run: RunFolder | None = None):
    """A Tune callback that writes each trial's full config (defaults filled) as ``config.yaml``.

    Tune calls ``on_trial_start`` before the trial has created its folder, so the file is
    written with ``write_text``, which creates the folder first. ``run`` is the run folder;
    without it the trial's own (local) path is used.
    """
    from ray import tune

    config_cls = workloads.get(experiment.workload).config_class()

    class WriteResolvedConfig(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            config = search_space.with_variant(trial.config)
            resolved = to_dict(from_dict(config_cls, config, experiment.source, "config"))
            trial_name = storage.name_of(trial.path)
            folder = RunFolder(run.join(trial_name) if run is not None else trial.path)
            folder.write_text("config.yaml", yaml_io.dumps(resolved))

    return WriteResolvedConfig()
