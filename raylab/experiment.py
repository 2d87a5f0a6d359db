"""Experiments: a YAML file in ``tune_configs/``, smoke overrides and command-line overrides.

An experiment file reads::

    # python -m raylab.tune dqn_softlinf
    workload: dqn_softlinf         # a name in trainers.WORKLOADS
    metric: eval/return_mean       # what the sweep optimizes ...
    mode: max                      # ... and in which direction
    config: {game: Pong}           # fixed fields of the workload's Config
    search: {loss: [mse, huber]}   # the search space (see raylab.search_space)
    num_samples: 1                 # repeats of the grid / samples of the space
    scheduler: {type: asha, max_t: 100}
    resources: {workers: 1, cpus_per_worker: 4, gpus_per_worker: 0.5}
    stop: {env/steps: 10000000}
    checkpoint: {every: 10, keep: 2}
    failure: {max_failures: 3}
    smoke: {config: {...}, resources: {...}, stop: {...}}   # what --smoke overrides

``load`` merges the ``smoke`` section (with ``--smoke``) and then the command-line overrides
into the file, and validates the result completely before anything starts.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from raylab import files, provenance, search_space, workloads, yaml_io
from raylab.config import ConfigValueError, check, from_dict, to_dict
from raylab.errors import UserError
from raylab.run_folder import EXPERIMENT_FILE, SOURCE_DIGEST, TRAIN_RUN, TUNE_RUN, RunFolder, file_digest

CONFIGS_ENV = "RAYLAB_CONFIGS"
"""Extra folders of experiment YAMLs (``os.pathsep``-separated), as ``--configs DIR`` adds."""
PACKAGE_ORIGIN = "package"


EXPERIMENTS_GROUP = "raylab.experiments"
"""Entry-point group of installed experiment folders: each entry names a package whose folder
holds experiment YAMLs. This repository registers ``tune_configs``; a lab's package adds its
own (``[project.entry-points."raylab.experiments"] lab = "mylab_configs"``)."""


def packaged_config_dirs() -> list[tuple[Path, str]]:
    """The folders of the packages registered in ``raylab.experiments``, in entry-point order,
    each with its package's name.

    An installation of raylab whose metadata predates the group (an editable install not
    reinstalled since) registers none: its ``tune_configs`` package is searched first then."""
    from importlib.metadata import PackageNotFoundError, distribution, entry_points
    from importlib.resources import files as package_files

    registered = [(entry.name, entry.value) for entry in entry_points(group=EXPERIMENTS_GROUP)]
    try:
        stale = not distribution("raylab").entry_points.select(group=EXPERIMENTS_GROUP)
    except PackageNotFoundError:  # raylab on the path, not installed
        stale = True
    dirs: dict[Path, str] = {}
    for name, package in [("", "tune_configs")] * stale + registered:
        try:
            dirs.setdefault(Path(str(package_files(package))), package)
        except ModuleNotFoundError:
            if name:
                raise UserError(
                    f"entry point '{name} = {package}' ({EXPERIMENTS_GROUP}): package '{package}' is not importable"
                ) from None
    return list(dirs.items())


def config_dirs() -> list[tuple[Path, str]]:
    """Folders experiments are found in, with their origin: the installed packages' folders
    (``packaged_config_dirs``; origin ``package NAME``), then each folder of ``RAYLAB_CONFIGS``
    (origin: the folder; a name there wins)."""
    dirs = [(path, f"{PACKAGE_ORIGIN} {package}") for path, package in packaged_config_dirs()]
    for folder in os.environ.get(CONFIGS_ENV, "").split(os.pathsep):
        if folder:
            path = Path(folder).expanduser()
            if not path.is_dir():
                raise UserError(f"{CONFIGS_ENV} / --configs: '{folder}' is not a folder")
            dirs.append((path, str(path)))
    return dirs


def add_config_dir(folder: str) -> None:
    """``--configs DIR``: search ``folder`` too (through ``RAYLAB_CONFIGS``, so trials see it)."""
    if not Path(folder).expanduser().is_dir():
        raise UserError(f"--configs: '{folder}' is not a folder")
    current = os.environ.get(CONFIGS_ENV)
    os.environ[CONFIGS_ENV] = os.pathsep.join(filter(None, [current, str(Path(folder).expanduser().absolute())]))


SPOT_RESOURCE = "spot"
"""The custom resource that spot node types declare (``cluster/gpu.yaml``: ``spot: 1000``)."""
SPOT_ASK = 0.001
"""How much of ``SPOT_RESOURCE`` one worker of a spot trial asks for: enough that only a spot
node can hold it, small enough never to limit how many trials share one."""


@dataclass(frozen=True)
class Resources:
    """What one trial asks of the cluster."""

    workers: int = 1
    """Workers per trial; more than one trains data-parallel (torch DDP) on Ray Train."""
    cpus_per_worker: float = 1.0
    """CPUs reserved for each worker (fractions allowed)."""
    gpus_per_worker: float = 0.0
    """GPUs for each worker; a fraction (0.5) packs several trials onto one GPU."""
    spot: bool = False
    """Run on spot (preemptible) nodes: each worker also asks for ``SPOT_ASK`` of the custom
    resource ``spot`` that only the spot node types of ``cluster/gpu.yaml`` declare (``--spot``)."""

    def __post_init__(self):
        check(self.workers >= 1, "workers", f"must be >= 1, got {self.workers}")
        check(self.cpus_per_worker >= 0, "cpus_per_worker", f"must be >= 0, got {self.cpus_per_worker}")
        check(self.gpus_per_worker >= 0, "gpus_per_worker", f"must be >= 0, got {self.gpus_per_worker}")
        check(
            self.gpus_per_worker <= 1 or self.gpus_per_worker == int(self.gpus_per_worker),
            "gpus_per_worker",
            f"above 1 must be a whole number, got {self.gpus_per_worker}",
        )
        # Two workers of one trial on one GPU: NCCL (the backend on CUDA nodes) refuses the
        # process group ("Duplicate GPU detected"), so a fraction is for single-worker trials.
        check(
            self.workers == 1 or self.gpus_per_worker in (0, int(self.gpus_per_worker)),
            "gpus_per_worker",
            f"{self.gpus_per_worker} with workers: {self.workers} would put two workers of a trial "
            "on one GPU, which NCCL refuses; give each worker a whole GPU, or use workers: 1",
        )

    @property
    def uses_ray_train(self) -> bool:
        """Whether trials run as Ray Train workers rather than directly in a Tune trial: only
        trials of several workers. A single-worker trial, GPU or not, runs its loop in the Tune
        trial itself, which holds its CPUs and GPU share on its worker node and nothing on the
        head (``benchmarks/trial_paths.py`` measures both paths)."""
        return self.workers > 1

    def worker_request(self) -> dict[str, float]:
        """What each worker asks of Ray: its CPUs, its GPUs when any, and ``SPOT_ASK`` of the
        ``spot`` resource when ``spot``."""
        return {
            "CPU": self.cpus_per_worker,
            **({"GPU": self.gpus_per_worker} if self.gpus_per_worker else {}),
            **({SPOT_RESOURCE: SPOT_ASK} if self.spot else {}),
        }

    def total(self) -> dict[str, float]:
        """The trial's whole request, e.g. ``{"CPU": 4, "GPU": 1}``."""
        return {"CPU": self.workers * self.cpus_per_worker, "GPU": self.workers * self.gpus_per_worker}


@dataclass(frozen=True)
class Scheduler:
    """The Ray Tune trial scheduler and its parameters."""

    type: Literal["fifo", "asha", "pbt"] = "fifo"
    """fifo runs every trial to its stop criteria; asha stops bad ones early; pbt mutates."""
    time_attr: str = "training_iteration"
    """The reported counter that measures progress (asha, pbt), e.g. ``env/steps``."""
    max_t: float = 100.0
    """asha: the time_attr value at which a trial is done."""
    grace_period: float = 1.0
    """asha: no trial is stopped before this much time_attr."""
    reduction_factor: float = 4.0
    """asha: keep the best 1/reduction_factor at each rung."""
    perturbation_interval: float = 10.0
    """pbt: time_attr between exploit/explore steps (a trial checkpoints at each)."""
    quantile_fraction: float = 0.25
    """pbt: the bottom fraction copies the top fraction."""
    resample_probability: float = 0.25
    """pbt: chance of resampling a mutated value instead of perturbing it."""
    hyperparam_mutations: dict[str, Any] = field(default_factory=dict)
    """pbt: config fields to mutate, each a search entry (choice list or range)."""

    def __post_init__(self):
        check(self.max_t > 0, "max_t", f"must be > 0, got {self.max_t}")
        check(self.grace_period > 0, "grace_period", f"must be > 0, got {self.grace_period}")
        check(self.reduction_factor > 1, "reduction_factor", f"must be > 1, got {self.reduction_factor}")
        check(self.perturbation_interval > 0, "perturbation_interval", "must be > 0")
        check(0 < self.quantile_fraction <= 0.5, "quantile_fraction", "must be in (0, 0.5]")
        check(0 <= self.resample_probability <= 1, "resample_probability", "must be in [0, 1]")
        check(
            self.type != "pbt" or bool(self.hyperparam_mutations),
            "hyperparam_mutations",
            "pbt needs at least one field to mutate",
        )


@dataclass(frozen=True)
class SearchAlg:
    """How each trial's config is chosen: Ray Tune's own variant generator (every grid point,
    ranges and choices sampled at random) or Optuna's model-based search (Tune's ``OptunaSearch``).

    With ``type: optuna`` every ``search`` entry is a range or a ``choice`` (Optuna samples each
    trial; a grid is refused) and ``num_samples`` is the trial budget (``time_budget_s`` a second
    one). ``--resume`` restores the searcher with the sweep: a resumed search does not repeat
    the configs it already suggested.
    """

    type: Literal["random", "optuna"] = "random"
    """random: Tune's default (grids expanded, the rest sampled at random); optuna: Optuna."""
    sampler: Literal["tpe", "random"] = "tpe"
    """optuna: the sampler, TPE (a Tree-structured Parzen Estimator) or Optuna's random one."""
    seed: int | None = 0
    """optuna: the sampler's seed (null: a fresh one each sweep)."""
    n_startup_trials: int = 10
    """optuna, tpe: trials sampled at random before TPE models the results."""
    multivariate: bool = False
    """optuna, tpe: model the parameters jointly rather than each alone."""
    constant_liar: bool = False
    """optuna, tpe: treat running trials as bad results, so concurrent suggestions spread out."""
    max_concurrent: int = 0
    """optuna: trials the searcher keeps running at once (Tune's ``ConcurrencyLimiter``); 0: as
    many as the cluster holds. A sequential searcher learns more from fewer trials at a time."""
    objectives: dict[str, Literal["min", "max"]] = field(default_factory=dict)
    """optuna: further objectives beside the experiment's ``metric``, each with its mode: a
    multi-objective search of their Pareto front (the report lists the front)."""

    def __post_init__(self):
        check(self.n_startup_trials >= 0, "n_startup_trials", f"must be >= 0, got {self.n_startup_trials}")
        check(self.max_concurrent >= 0, "max_concurrent", f"must be >= 0, got {self.max_concurrent}")
        for key in ("max_concurrent", "objectives"):
            check(
                self.type == "optuna" or not getattr(self, key),
                key,
                "needs type: optuna (the random generator has no searcher state to limit or steer)"
                + ("; use max_concurrent_trials" if key == "max_concurrent" else ""),
            )


@dataclass(frozen=True)
class Checkpointing:
    """How often trials save their state and how many states are kept."""

    every: int = 1
    """Save a checkpoint every this many reports of a trial."""
    keep: int | None = 2
    """Checkpoints kept per trial (the newest); null keeps all."""

    def __post_init__(self):
        check(self.every >= 1, "every", f"must be >= 1, got {self.every}")
        check(self.keep is None or self.keep >= 1, "keep", f"must be >= 1 or null, got {self.keep}")


@dataclass(frozen=True)
class Failure:
    """What happens when a trial's worker or node dies."""

    max_failures: int = 0
    """Restarts of a failed trial from its last checkpoint (-1: without limit)."""

    def __post_init__(self):
        check(self.max_failures >= -1, "max_failures", f"must be >= -1, got {self.max_failures}")


@dataclass(frozen=True)
class Estimate:
    """What one trial costs, as the experiment file states it (``--dry-run`` multiplies it out)."""

    steps_per_s: float = 0.0
    """Progress (the unit of the ``stop`` criterion) one trial makes per second; 0: not stated."""
    rate_basis: str = ""
    """Where ``steps_per_s`` comes from when it is not measured (a target, an estimate)."""
    rate_measured: str = ""
    """Where ``steps_per_s`` was measured (benchmark, machine); empty: not measured, so each
    dollar figure says the rate is a target (``rate_basis``)."""
    memory_bytes: float = 0.0
    """Bytes of host memory one trial needs; 0: the workload's own figure (its ``memory``
    function), or unknown. ``--dry-run --cluster`` packs trials on nodes by it."""
    checkpoint_bytes: float = 0.0
    """Bytes one checkpoint of one trial holds (``checkpoint.keep`` of them are kept); 0: not stated."""
    trial_steps: float = 0.0
    """A trial's length in the unit of ``steps_per_s``, for an experiment with no ``stop``
    criterion (its loop ends by itself after the configured epochs or steps); 0: not stated."""
    unit: str = ""
    """The unit of ``steps_per_s`` and ``trial_steps`` there (``epochs``, ``victim steps``)."""

    def __post_init__(self):
        check(self.steps_per_s >= 0, "steps_per_s", f"must be >= 0, got {self.steps_per_s}")
        check(self.checkpoint_bytes >= 0, "checkpoint_bytes", f"must be >= 0, got {self.checkpoint_bytes}")
        check(self.trial_steps >= 0, "trial_steps", f"must be >= 0, got {self.trial_steps}")
        check(self.memory_bytes >= 0, "memory_bytes", f"must be >= 0, got {self.memory_bytes}")


@dataclass(frozen=True)
class Experiment:
    """A fully resolved and validated experiment."""

    name: str
    """The experiment's name (its file's stem)."""
    source: str
    """The YAML file it came from."""
    workload: str
    """The workload in ``trainers.WORKLOADS`` whose train loop every trial runs."""
    metric: str
    """The reported metric the sweep optimizes."""
    mode: Literal["min", "max"]
    """Whether larger (max) or smaller (min) ``metric`` is better."""
    config: dict[str, Any]
    """Fixed config fields (validated; the workload's defaults fill the rest)."""
    search: dict[str, dict[str, list]] = field(default_factory=dict)
    """The search space, normalized to ``{field: {kind: args}}``."""
    description: str = ""
    """One line for ``--list``."""
    num_samples: int = 1
    """Repeats of the grid, or samples of the random space."""
    max_concurrent_trials: int = 0
    """Trials run at once; 0 lets raylab fit as many as the cluster holds."""
    scheduler: Scheduler = field(default_factory=Scheduler)
    search_alg: SearchAlg = field(default_factory=SearchAlg)
    """How each trial's config is chosen: Tune's variant generator (random) or Optuna."""
    time_budget_s: float = 0.0
    """Start no new trial after this many seconds of the sweep, and stop the running ones
    (Tune's ``time_budget_s``); 0: no time budget, ``num_samples`` alone bounds the sweep."""
    resources: Resources = field(default_factory=Resources)
    stop: dict[str, float] = field(default_factory=dict)
    """Stop a trial when a reported metric reaches this value (e.g. ``env/steps``)."""
    checkpoint: Checkpointing = field(default_factory=Checkpointing)
    failure: Failure = field(default_factory=Failure)
    estimate: Estimate = field(default_factory=Estimate)
    smoke: bool = False
    """Whether the file's ``smoke`` overrides were applied."""

    def __post_init__(self):
        check(self.num_samples >= 1, "num_samples", f"must be >= 1, got {self.num_samples}")
        check(self.max_concurrent_trials >= 0, "max_concurrent_trials", "must be >= 0")
        check(self.time_budget_s >= 0, "time_budget_s", f"must be >= 0, got {self.time_budget_s}")

    def trial_length(self) -> tuple[str, float] | None:
        """``(unit, amount)`` one trial runs: its ``stop`` criterion, else the estimate's
        ``trial_steps`` in its ``unit``; None when neither states it."""
        if self.stop:
            key, steps = next(iter(self.stop.items()))
            return key, float(steps)
        if self.estimate.trial_steps:
            return self.estimate.unit or "steps", self.estimate.trial_steps
        return None

    def resolved_config(self) -> dict[str, Any]:
        """The workload's full config: defaults, then fixed values (search keys left out)."""
        cls = workloads.get(self.workload).config_class()
        return to_dict(from_dict(cls, self.config, self.source, "config"))

    def to_yaml_dict(self) -> dict[str, Any]:
        """Everything that defines this experiment, for ``--dry-run`` and the run folder."""
        out = to_dict(self)
        out["config"] = self.resolved_config()
        for key in self.searched_fields():
            out["config"].pop(key, None)
        return out

    def searched_fields(self) -> list[str]:
        """The config fields the search sets, each once: its keys, and the fields that
        ``variant`` groups set in place of the ``variant`` key itself."""
        fields: dict[str, None] = {}
        for key, spec in self.search.items():
            if key == search_space.VARIANT:
                fields.update(dict.fromkeys(k for group in spec.get("grid", []) for k in group))
            else:
                fields[key] = None
        return list(fields)

    def write_to(self, run: RunFolder, command: str = TUNE_RUN, notes: str = "", tags: tuple[str, ...] = ()) -> None:
        """Write the run's ``experiment.yaml``: this experiment as it runs now, with its
        provenance (the code's commit, package versions, host, start time), the ``command`` that
        ran it, and the user's ``notes`` and ``tags`` (``--notes``, ``--tag``) when given."""
        record = {**provenance.of_workload(workloads.get(self.workload)), "command": command}
        if digest := file_digest(self.source):
            record[SOURCE_DIGEST] = digest
        if notes:
            record["notes"] = notes
        if tags:
            record["tags"] = list(dict.fromkeys(tags))
        run.write_text(EXPERIMENT_FILE, yaml_io.dumps({**self.to_yaml_dict(), "provenance": record}))


SECTIONS = {f.name for f in dataclasses.fields(Experiment)} - {"name", "source", "smoke"}


def available() -> dict[str, Path]:
    """Experiment names with their files, from every folder of ``config_dirs``."""
    return {name: path for name, (path, _) in available_with_origin().items()}


def available_with_origin() -> dict[str, tuple[Path, str]]:
    """Experiment names with their files and where each came from (``package NAME`` or a folder).

    Two registered packages that ship an experiment of the same name are refused, naming both,
    unless a ``--configs`` folder (``RAYLAB_CONFIGS``) holds that name too: a folder given
    there is the explicit choice, and wins over any package.
    """
    found: dict[str, tuple[Path, str]] = {}
    clashes: dict[str, str] = {}
    for folder, origin in config_dirs():
        packaged = origin.startswith(f"{PACKAGE_ORIGIN} ")
        for path in sorted(folder.glob("*.yaml")):
            earlier = found.get(path.stem)
            if packaged and earlier is not None and path.stem not in clashes:
                clashes[path.stem] = (
                    f"experiment '{path.stem}' is shipped by two packages ({EXPERIMENTS_GROUP}): "
                    f"{earlier[1]} ({earlier[0]}) and {origin} ({path}); rename one of them, or give "
                    f"the one to run in a folder of your own with --configs DIR"
                )
            elif not packaged:
                clashes.pop(path.stem, None)
            found[path.stem] = (path, origin)
    if clashes:
        raise UserError(next(iter(clashes.values())))
    return found


def find(name_or_path: str) -> Path:
    """The YAML file of an experiment name, or the path itself if it is a file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise UserError(f"{path}: no such experiment file")
        return path
    known = available()
    if name_or_path not in known:
        raise UserError(
            f"unknown experiment '{name_or_path}'; available: {', '.join(known) or '(none)'} "
            f"(in {', '.join(str(folder) for folder, _ in config_dirs())})"
        )
    return known[name_or_path]


def load(name_or_path: str, overrides: list[str] = (), smoke: bool = False) -> Experiment:
    """Read, merge and validate an experiment; ``UserError`` on any problem."""
    path = find(name_or_path)
    source = str(path)
    raw = yaml_io.load(path)
    if not isinstance(raw, dict):
        raise UserError(f"{source}: expected a mapping of experiment keys, got {type(raw).__name__}")
    _check_sections(raw, source, SECTIONS | {"smoke"})
    smoke_section = raw.pop("smoke", None)
    if smoke:
        if smoke_section is None:
            raise UserError(f"{source}: has no 'smoke' section, so --smoke has nothing to apply")
        if not isinstance(smoke_section, dict):
            raise UserError(f"{source}: 'smoke' must be a mapping of overrides")
        _check_sections(smoke_section, f"{source} (smoke)", SECTIONS - {"workload"})
        raw = merge(raw, smoke_section)
    merged = raw
    for text in overrides:
        merged = merge(merged, parse_override(text), f"command line: override '{files.redacted(text)}'")
    try:
        return validate(merged, name=path.stem, source=source, smoke=smoke)
    except UserError:
        blamed = _blame_override(raw, overrides, path.stem, source, smoke)
        if blamed is None:
            raise
        text, message = blamed
        if message.startswith(source):
            message = message[len(source) :].lstrip(": ")
        raise UserError(f"command line: override '{files.redacted(text)}': {message} (experiment {source})") from None


def _blame_override(
    raw: dict[str, Any], overrides: list[str], name: str, source: str, smoke: bool
) -> tuple[str, str] | None:
    """The first command-line override that makes a valid file invalid, with the error it
    causes; None when the file (with its smoke section) is invalid by itself."""
    try:
        validate(raw, name=name, source=source, smoke=smoke)
    except UserError:
        return None
    for text in overrides:
        raw = merge(raw, parse_override(text))
        try:
            validate(raw, name=name, source=source, smoke=smoke)
        except UserError as err:
            return text, str(err)
    return None


REQUIRED_KEYS = ("workload", "metric", "mode")
"""The keys every experiment file states; every other section has a default (``config`` and
``search``: empty)."""


def validate(raw: dict[str, Any], name: str, source: str, smoke: bool = False) -> Experiment:
    """Turn a merged experiment dict into an ``Experiment``, checking every part."""
    for key in REQUIRED_KEYS:
        if key not in raw:
            raise UserError(f"{source}: missing required key '{key}'")
    raw = dict(raw)
    if not isinstance(raw["workload"], str):
        raise UserError(f"{source}: workload: expected a name, got {raw['workload']!r}")
    try:
        workload = workloads.get(raw["workload"])
    except UserError as err:
        raise UserError(f"{source}: workload: {err}") from None
    config_cls = workload.config_class()
    config = raw.pop("config", None) or {}
    search = raw.pop("search", None) or {}
    if not isinstance(config, dict):
        raise UserError(f"{source}: config: expected a mapping, got {config!r}")
    if not isinstance(search, dict):
        raise UserError(f"{source}: search: expected a mapping, got {search!r}")
    search = {k: search_space.normalize(v, source, f"search.{k}") for k, v in search.items()}
    from_dict(config_cls, config, source, "config")  # fixed values alone are valid
    search_space.validate(config_cls, config, search, source)
    experiment = from_dict(
        Experiment,
        {**raw, "config": config, "search": search, "name": name, "source": source, "smoke": smoke},
        source,
    )
    if workload.metrics and experiment.metric not in workload.metrics:
        raise UserError(
            f"{source}: metric '{experiment.metric}' is not reported by workload "
            f"'{experiment.workload}'; it reports: {', '.join(workload.metrics)}"
        )
    check_stop_values(experiment)
    if workload.metrics:
        check_progress_keys(experiment, workload.metrics)
    if experiment.resources.workers > 1 and not workload.data_parallel:
        raise UserError(
            f"{source}: resources.workers: {experiment.resources.workers} asks for data-parallel "
            f"training, but workload '{experiment.workload}' is not data-parallel (each worker "
            "would train the same model on the same data); use resources.workers: 1"
        )
    check_search_alg(experiment, workload.metrics)
    for key, spec in experiment.scheduler.hyperparam_mutations.items():
        search_space.validate(
            config_cls,
            config,
            {key: search_space.normalize(spec, source, f"scheduler.hyperparam_mutations.{key}")},
            source,
        )
    return experiment


# Counters Ray Tune adds to every result of a trial (``ray.tune.result.AUTO_RESULT_KEYS``) that
# a ``stop`` criterion or a scheduler's ``time_attr`` may use besides the workload's metrics.
TUNE_COUNTERS = ("training_iteration", "time_total_s", "time_since_restore", "iterations_since_restore")


def is_counter(key: str) -> bool:
    """Whether a reported key counts up from 0 (Tune's counters, ``env/steps``, ``train/epoch``):
    a ``stop`` value at or below 0 on it ends each trial at its first report."""
    last = key.rsplit("/", 1)[-1]
    return key in TUNE_COUNTERS or last in ("steps", "step", "epoch", "epochs", "iteration", "iterations")


def check_search_alg(experiment: Experiment, metrics: tuple[str, ...]) -> None:
    """Refuse a ``search_alg`` that cannot search this experiment's space.

    Optuna samples every trial: a grid (a list, or ``variant`` groups) has no Optuna
    distribution, so it is refused with the ``choice`` that samples the same values; PBT
    replaces configs itself and takes no searcher; an objective must be reported and differ
    from ``metric``.
    """
    alg, source = experiment.search_alg, experiment.source
    if alg.type != "optuna":
        return
    for key, spec in experiment.search.items():
        if "grid" in spec:
            hint = (
                "list the groups' fields as separate choices"
                if key == search_space.VARIANT
                else f"sample the same values with search.{key}: {{choice: {spec['grid']!r}}}"
            )
            raise UserError(
                f"{source}: search.{key}: a grid cannot be searched by search_alg.type optuna "
                f"(Optuna samples each of num_samples trials); {hint}"
            )
    if not experiment.search:
        raise UserError(f"{source}: search_alg.type optuna: the search section is empty, nothing to search")
    import importlib.util

    if importlib.util.find_spec("optuna") is None:
        raise UserError(
            f"{source}: search_alg.type optuna: the 'optuna' package is not installed "
            "(pip install optuna; the fair_adv and dev extras bring it)"
        )
    if experiment.scheduler.type == "pbt":
        raise UserError(
            f"{source}: search_alg.type optuna with scheduler.type pbt: PBT mutates configs itself "
            "and takes no searcher; use asha or fifo"
        )
    for metric in alg.objectives:
        if metric == experiment.metric:
            raise UserError(
                f"{source}: search_alg.objectives.{metric}: already the experiment's metric; "
                "list only the further objectives"
            )
        if metrics and metric not in metrics:
            raise UserError(
                f"{source}: search_alg.objectives.{metric}: not reported by workload "
                f"'{experiment.workload}'; it reports: {', '.join(metrics)}"
            )


def check_stop_values(experiment: Experiment) -> None:
    """Refuse a ``stop`` value that is not a number, or that ends every trial at its first
    report (0 or below on a counter: ``stop.training_iteration=-1``)."""
    for key, value in experiment.stop.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise UserError(f"{experiment.source}: stop.{key}: expected a number, got {value!r}")
        if value <= 0 and is_counter(key):
            raise UserError(
                f"{experiment.source}: stop.{key}: {value:g} would stop every trial at its first "
                f"report ('{key}' counts up from 0); give a value > 0"
            )


def check_progress_keys(experiment: Experiment, metrics: tuple[str, ...]) -> None:
    """Refuse a ``stop`` key or a scheduler ``time_attr`` that no result will carry.

    Tune ignores a stop key that never appears (the trial runs forever) and ASHA never prunes
    on a ``time_attr`` it never sees, so a typo is an error naming what the workload reports.
    """
    known = (*metrics, *TUNE_COUNTERS)
    asked = [(f"stop.{key}", key) for key in experiment.stop]
    if experiment.scheduler.type != "fifo":
        asked.append(("scheduler.time_attr", experiment.scheduler.time_attr))
    for where, key in asked:
        if key not in known:
            raise UserError(
                f"{experiment.source}: {where}: '{key}' is not reported by workload "
                f"'{experiment.workload}'; it reports: {', '.join(known)}"
            )


def from_saved(raw: Any, source: str) -> Experiment:
    """The experiment a run folder saved (``Experiment.to_yaml_dict``), validated again."""
    if not isinstance(raw, dict) or not {"name", "workload"} <= set(raw):
        raise UserError(f"{source}: not an experiment saved by raylab")
    raw = dict(raw)
    name, smoke = raw.pop("name"), bool(raw.pop("smoke", False))
    raw.pop("source", None)
    raw.pop("provenance", None)  # where the run came from (raylab.provenance), not settings
    return validate(raw, name=name, source=source, smoke=smoke)


def from_run(run: RunFolder, what: str = "--resume") -> Experiment:
    """The experiment ``run`` was started with (its ``experiment.yaml``), validated again;
    a ``UserError`` starting with ``what`` when the folder has none."""
    source = run.join(EXPERIMENT_FILE)
    text = run.read_text(EXPERIMENT_FILE)
    if text is None:
        raise UserError(f"{what}: {source} is missing; this folder was not started by raylab")
    return from_saved(yaml_io.loads(text, source), source)


def new_run_name(experiment: Experiment, command: str = TUNE_RUN) -> str:
    """``NAME[-train][-smoke]-YYYYmmdd-HHMMSS``: the folder of a new run, so that new runs never
    mix with old ones; a ``python -m raylab.train`` run's says ``-train``."""
    import datetime

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    train = "-train" if command == TRAIN_RUN else ""
    return f"{experiment.name}{train}{'-smoke' if experiment.smoke else ''}-{stamp}"


def merge(base: dict[str, Any], update: dict[str, Any], where: str = "") -> dict[str, Any]:
    """Deep-merge ``update`` into a copy of ``base``.

    Search entries are replaced whole. Fixing a field in ``config`` removes it from
    ``search`` and the reverse, so ``config.loss=mse`` on the command line pins ``loss``.
    """
    out = copy.deepcopy(base)
    for key, value in update.items():
        if key == "search" and isinstance(value, dict):
            out.setdefault("search", {})
            value = _filter_variants(out["search"] or {}, value, where)
            out["search"] = {**(out["search"] or {}), **value}
            if isinstance(out.get("config"), dict):
                out["config"] = {k: v for k, v in out["config"].items() if k not in value}
        elif key == "config" and isinstance(value, dict):
            out["config"] = {**(out.get("config") or {}), **value}
            if isinstance(out.get("search"), dict):
                out["search"] = {k: v for k, v in out["search"].items() if k not in value}
                _pin_variants(out["search"], value)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value, where)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _filter_variants(search: dict[str, Any], update: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``update`` with a grid over a field that ``search``'s variant groups set turned into
    those groups, filtered: a group that sets the field stays when its value is listed; a group
    that leaves the field alone stays. A listed value that no group sets is refused, showing
    the ``search.variant=[...]`` form that would sweep it.

    ``search.loss=[mse,soft_linf]`` on ``[{loss: mse}, {loss: huber}, {loss: soft_linf, beta: 3},
    {loss: soft_linf, beta: 30}]`` keeps ``[{loss: mse}, {loss: soft_linf, beta: 3},
    {loss: soft_linf, beta: 30}]``. A range or a ``choice`` over such a field cannot filter
    groups: ``UserError`` showing the ``search.variant=[...]`` form that replaces them.
    """
    groups = search.get(search_space.VARIANT)
    if isinstance(groups, dict) and list(groups) == ["grid"]:
        groups = groups["grid"]
    if search_space.VARIANT in update or not isinstance(groups, list):
        return update
    if not all(isinstance(group, dict) for group in groups):
        return update  # not a valid variant entry: validation names the problem
    update = dict(update)
    for key, spec in list(update.items()):
        if not any(key in group for group in groups):
            continue
        values = spec["grid"] if isinstance(spec, dict) and list(spec) == ["grid"] else spec
        if not isinstance(values, list):
            example = _groups_text(groups[:2])
            raise UserError(
                f"{where + ': ' if where else ''}search.{key}: '{key}' is set by the groups of "
                f"search.variant, which a {next(iter(spec)) if isinstance(spec, dict) else 'value'} "
                f"cannot filter; keep some with a list (search.{key}=[...]) or replace the groups: "
                f"search.variant=[{example}]"
            )
        have = [group[key] for group in groups if key in group]
        missing = [value for value in values if value not in have]
        if missing:
            raise UserError(
                f"{where + ': ' if where else ''}search.{key}: no group of search.variant sets "
                f"{key}: {missing[0]!r} (they set {', '.join(dict.fromkeys(map(str, have)))}); "
                f"to sweep other groups replace them: search.variant=[{_groups_text(groups, key, values)}]"
            )
        # groups that leave the field alone stay; the others stay when their value is listed
        groups = [group for group in groups if key not in group or group[key] in values]
        del update[key]
        update[search_space.VARIANT] = groups
    return update


def _groups_text(groups: list[dict[str, Any]], key: str = "", values: list = ()) -> str:
    """Variant groups as a command line writes them (``{loss: mse},{loss: huber}``), plus a
    group ``{key: value}`` for each of ``values`` that no group sets."""
    groups = list(groups) + [{key: v} for v in values if not any(g.get(key) == v for g in groups)]
    return ",".join("{" + ", ".join(f"{k}: {v}" for k, v in group.items()) + "}" for group in groups)


def _pin_variants(search: dict[str, Any], pinned: dict[str, Any]) -> None:
    """Keep the variant groups that agree with pinned fields, without those fields.

    ``config.loss=soft_linf`` on a sweep of ``[{loss: mse}, {loss: soft_linf, beta: 3}, ...]``
    leaves the soft_linf groups (``[{beta: 3}, ...]``); groups left empty are dropped.
    """
    groups = search.get(search_space.VARIANT)
    if isinstance(groups, dict) and list(groups) == ["grid"]:
        groups = groups["grid"]
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        return  # not a valid variant entry: validation names the problem
    kept = []
    for group in groups:
        if all(group.get(k, v) == v for k, v in pinned.items()):
            rest = {k: v for k, v in group.items() if k not in pinned}
            if rest and rest not in kept:
                kept.append(rest)
    if kept:
        search[search_space.VARIANT] = kept
    else:
        search.pop(search_space.VARIANT)


def parse_override(text: str) -> dict[str, Any]:
    """``config.lr=3e-4`` as ``{"config": {"lr": 3e-4}}``; the value is read as YAML."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(
            f"command line: cannot parse override '{text}'; expected key=value, "
            f"for example config.lr=3e-4 or search.loss=[mse,huber]"
        )
    parsed = yaml_io.loads(value, f"command line: override '{text}'") if value.strip() else None
    parts = key.split(".")
    if parts[0] == "stop" and len(parts) > 2:  # metric names may contain dots
        parts = ["stop", ".".join(parts[1:])]
    if parts[0] not in SECTIONS:
        raise UserError(
            f"command line: override '{text}': unknown key '{parts[0]}'; valid keys: {', '.join(sorted(SECTIONS))}"
        )
    nested: Any = parsed
    for part in reversed(parts):
        nested = {part: nested}
    return nested


def _check_sections(raw: dict[str, Any], source: str, allowed: set[str]) -> None:
    for key in raw:
        if key not in allowed:
            raise UserError(f"{source}: unknown key '{key}'; valid keys: {', '.join(sorted(allowed))}")


__all__ = ["Experiment", "ConfigValueError", "available", "find", "load", "merge", "parse_override"]
