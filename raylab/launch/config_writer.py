"""A Tune callback that writes each trial's full config (the workload's defaults filled in) into
its trial folder as it starts, so a reader sees every value the trial ran with."""

from __future__ import annotations

from raylab import workloads
from raylab.config import from_dict, to_dict, with_variant
from raylab.experiment import Experiment
from raylab.run_folder import RunFolder, name_of


def resolve(experiment: Experiment, trial_config: dict) -> dict:
    """A trial's full Config as plain values: the workload's defaults, the experiment's fixed
    fields, the trial's searched values and its ``variant`` group's fields
    (``dataclasses.asdict`` of the workload's Config)."""
    config_cls = workloads.get(experiment.workload).config_class()
    config = with_variant(trial_config)
    return to_dict(from_dict(config_cls, config, experiment.source, "config"))


def callback(experiment: Experiment, run: RunFolder):
    """A Tune callback that writes each trial's full config (defaults filled) into its folder of
    the run folder ``run`` (``TrialFolder.write_config``).

    Tune calls ``on_trial_start`` before the trial has created its folder; the write creates it.
    """
    from ray import tune

    class WriteResolvedConfig(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            run.trial(name_of(trial.path)).write_config(resolve(experiment, trial.config))

    return WriteResolvedConfig()
