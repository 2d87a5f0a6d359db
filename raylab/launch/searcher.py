"""The search algorithm an experiment names (``search_alg:``): Tune's variant generator, or
Optuna (Tune's ``OptunaSearch``) behind a ``ConcurrencyLimiter``; and what ``--dry-run`` says of it.

Optuna gets the search space itself (converted from the Tune domains with
``OptunaSearch.convert_search_space``), so the Tuner's ``param_space`` holds only the fixed
config and the searcher's suggestions are merged into it per trial. Tune saves the searcher
with the sweep's state, and ``Tuner.restore`` restores it: the study's trials and its sampler's
random state come back, so a resumed sweep goes on where the search stopped.
"""

from __future__ import annotations

from typing import Any

from raylab import search_space
from raylab.experiment import Experiment


def uses_searcher(experiment: Experiment) -> bool:
    """Whether the experiment's configs come from a searcher (``search_alg.type`` not random)."""
    return experiment.search_alg.type != "random"


def param_space(experiment: Experiment) -> dict[str, Any]:
    """The Tuner's ``param_space``: the fixed config, plus the Tune domains when Tune's own
    variant generator samples them (a searcher gets the domains itself)."""
    if uses_searcher(experiment):
        return dict(experiment.config)
    return {**experiment.config, **search_space.to_tune(experiment.search)}


def objectives(experiment: Experiment) -> tuple[list[str], list[str]]:
    """The searcher's metrics and their modes: the experiment's metric first, then the
    further ``search_alg.objectives``."""
    alg = experiment.search_alg
    return [experiment.metric, *alg.objectives], [experiment.mode, *alg.objectives.values()]


def make_sampler(experiment: Experiment):
    """The Optuna sampler ``search_alg`` names, seeded with ``search_alg.seed``."""
    import optuna

    alg = experiment.search_alg
    if alg.sampler == "random":
        return optuna.samplers.RandomSampler(seed=alg.seed)
    return optuna.samplers.TPESampler(
        seed=alg.seed,
        n_startup_trials=alg.n_startup_trials,
        multivariate=alg.multivariate,
        constant_liar=alg.constant_liar,
    )


def make_searcher(experiment: Experiment):
    """Tune's search algorithm for the experiment; None for Tune's default variant generator."""
    if not uses_searcher(experiment):
        return None
    import optuna
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one INFO line per trial otherwise
    metrics, modes = objectives(experiment)
    multi = len(metrics) > 1
    searcher = OptunaSearch(
        space=OptunaSearch.convert_search_space(search_space.to_tune(experiment.search)),
        metric=metrics if multi else metrics[0],
        mode=modes if multi else modes[0],
        sampler=make_sampler(experiment),
    )
    if experiment.search_alg.max_concurrent:
        searcher = ConcurrencyLimiter(searcher, max_concurrent=experiment.search_alg.max_concurrent)
    return searcher


def trial_dirname(trial, keys: tuple[str, ...] = ()) -> str:
    """A trial folder's name under a searcher: the trainable, the trial id and the searched
    values (Tune's own name would spell out every fixed field of the config too)."""
    values = ",".join(f"{key}={_short(trial.config.get(key))}" for key in keys)
    return f"{trial.trainable_name}_{trial.trial_id}_{values}"[:120]


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value).replace("/", "_")


def dirname_creator(experiment: Experiment):
    """Tune's ``trial_dirname_creator`` for the experiment: ``trial_dirname`` under a searcher,
    else None (Tune's own name, made of the sampled values only)."""
    import functools

    if not uses_searcher(experiment):
        return None
    return functools.partial(trial_dirname, keys=tuple(experiment.search))


def describe(experiment: Experiment) -> str:
    """What ``--dry-run`` says of the search: the searcher, its budget and what it will do."""
    alg = experiment.search_alg
    budget = f"; time budget {experiment.time_budget_s:g} s" if experiment.time_budget_s else ""
    if not uses_searcher(experiment):
        grid = search_space.grid_size(experiment.search)
        sampled = [k for k, spec in experiment.search.items() if "grid" not in spec]
        return (
            f"# searcher: Tune's variant generator: {grid} grid point(s) x num_samples {experiment.num_samples}"
            + (f", sampling {', '.join(sampled)} at random" if sampled else "")
            + budget
        )
    metrics, modes = objectives(experiment)
    goal = " and ".join(f"{mode} {metric}" for metric, mode in zip(metrics, modes))
    if alg.sampler == "tpe":
        if alg.n_startup_trials >= experiment.num_samples:
            how = f"TPE (seed {alg.seed}): every trial random (n_startup_trials {alg.n_startup_trials} >= num_samples)"
        else:
            how = (
                f"TPE (seed {alg.seed}): {alg.n_startup_trials} random trial(s), "
                "then each next config from a model of the results so far"
                + (", parameters modelled jointly" if alg.multivariate else "")
                + (", running trials counted as bad (constant liar)" if alg.constant_liar else "")
            )
    else:
        how = f"Optuna's random sampler (seed {alg.seed})"
    return (
        f"# searcher: Optuna {how}; {experiment.num_samples} trial(s) in all"
        + budget
        + (f"; at most {alg.max_concurrent} at once (ConcurrencyLimiter)" if alg.max_concurrent else "")
        + f"; goal: {goal}"
        + (" (a Pareto front of trade-offs)" if len(metrics) > 1 else "")
        + (f"; {experiment.scheduler.type} stops poor trials early" if experiment.scheduler.type == "asha" else "")
    )
