"""A Tune callback that writes each trial's full config (the workload's defaults filled in) into
its trial folder as it starts, so a reader sees every value the trial ran with."""

from __future__ import annotations

from raylab import search_space, workloads
from raylab.config import from_dict, to_dict
from raylab.experiment import Experiment
from raylab.run_folder import RunFolder, name_of


def callback(experiment: Experiment, run: RunFolder):
    """A Tune callback that writes each trial's full config (defaults filled) into its folder of
    the run folder ``run`` (``TrialFolder.write_config``).

    Tune calls ``on_trial_start`` before the trial has created its folder; the write creates it.
    """
    from ray import tune

    config_cls = workloads.get(experiment.workload).config_class()

    class WriteResolvedConfig(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            config = search_space.with_variant(trial.config)
            resolved = to_dict(from_dict(config_cls, config, experiment.source, "config"))
            run.trial(name_of(trial.path)).write_config(resolved)

    return WriteResolvedConfig()
