"""The Ray Tune trial scheduler an experiment names: FIFO, ASHA or PBT."""

from __future__ import annotations

from raylab import search_space
from raylab.experiment import Experiment


def make_scheduler(experiment: Experiment):
    """The Tune scheduler the experiment names: FIFO, ASHA or PBT."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining

    spec = experiment.scheduler
    if spec.type == "asha":
        return ASHAScheduler(
            time_attr=spec.time_attr,
            max_t=spec.max_t,
            grace_period=spec.grace_period,
            reduction_factor=spec.reduction_factor,
        )
    if spec.type == "pbt":
        mutations = {}
        for key, entry in spec.hyperparam_mutations.items():
            ((kind, args),) = search_space.normalize(entry, experiment.source, key).items()
            kind = "choice" if kind == "grid" else kind
            mutations[key] = search_space.to_tune({key: {kind: args}})[key]
        return PopulationBasedTraining(
            time_attr=spec.time_attr,
            perturbation_interval=spec.perturbation_interval,
            hyperparam_mutations=mutations,
            quantile_fraction=spec.quantile_fraction,
            resample_probability=spec.resample_probability,
        )
    return FIFOScheduler()
