"""Launching a sweep: Ray start or join, resource checks, trainables, Tuner, summary.

Trials that need one CPU worker run the workload's train loop directly as a Ray Tune function
trainable: that costs what plain Tune costs. Trials that need several workers or GPUs run a
Tune function that drives a Ray Train ``TorchTrainer`` (Ray Train v2), whose workers run the
same loop; that path costs more to start and pays for itself on multi-worker or GPU work.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import logging
import math
import os
import socket
from pathlib import Path
from typing import Any, Callable

from raylab import search_space, session, workloads, yaml_io
from raylab.config import from_dict, to_dict
from raylab.errors import UserError
from raylab.experiment import Experiment, validate

EXPERIMENT_FILE = "experiment.yaml"
RUN_INTERNAL = "_raylab"


# ---------------------------------------------------------------------------- Ray start/join


def connect(
    address: str | None = None, dashboard: bool = False, state_api: bool = False
) -> dict[str, Any]:
    """Start a local Ray sized to this machine, or join ``address`` (``auto`` or ``HOST:PORT``).

    Returns what the caller may print: whether Ray was started here and the dashboard URL
    (with ``dashboard``). ``state_api`` starts the dashboard process without announcing it:
    Ray Train's controller polls Ray's state API, which that process serves. An address that
    does not answer fails within seconds.
    """
    import ray

    if ray.is_initialized():
        return {"started": False, "dashboard_url": None}
    if address:
        if address != "auto" and not address.startswith("ray://"):
            _check_reachable(address)
        try:
            context = ray.init(address=address, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise UserError(f"cannot join Ray cluster at '{address}': {err}") from None
        return {"started": False, "dashboard_url": context.dashboard_url}
    context = ray.init(
        include_dashboard=dashboard or state_api,
        dashboard_host="127.0.0.1",
        logging_level=logging.WARNING,
    )
    url = f"http://{context.dashboard_url}" if dashboard and context.dashboard_url else None
    return {"started": True, "dashboard_url": url}


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address '{address}': expected auto or HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise UserError(f"cannot reach Ray cluster at {address}: {err.strerror or err}") from None


def local_resources() -> dict[str, float]:
    """CPUs and GPUs of this machine, as a local Ray would see them (without starting Ray)."""
    from ray._private.accelerators import get_accelerator_manager_for_resource

    gpus = get_accelerator_manager_for_resource("GPU").get_current_node_num_accelerators()
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}


def check_resources(experiment: Experiment, available: dict[str, float], local: bool) -> None:
    """Refuse a trial that this cluster can never run, instead of leaving it pending forever.

    On a local Ray the check is against this machine; on a joined cluster a shortfall is only
    warned about, since an autoscaler may still add the nodes.
    """
    resources = experiment.resources
    needs = {"CPU": resources.cpus_per_worker, "GPU": resources.gpus_per_worker}
    for name, per_worker in needs.items():
        have = available.get(name, 0.0)
        if per_worker <= 0 or per_worker * resources.workers <= have:
            continue
        message = (
            f"{experiment.source}: resources ask for {resources.workers} worker(s) x "
            f"{per_worker:g} {name} per trial, but this {'machine' if local else 'cluster'} has "
            f"{have:g} {name}"
        )
        if local:
            hint = " (use --address to run on a GPU cluster)" if name == "GPU" else ""
            raise UserError(message + hint)
        print(f"warning: {message} now; trials will wait for the autoscaler to add nodes")


def fitting_trials(experiment: Experiment, available: dict[str, float]) -> int:
    """How many trials fit on the cluster at once (at least 1)."""
    fits = [
        math.floor(available.get(name, 0.0) / need + 1e-9)
        for name, need in experiment.resources.total().items()
        if need > 0
    ]
    return max(1, min(fits)) if fits else 1


def preflight(experiment: Experiment, limit: int = 256) -> None:
    """Run the workload's preflight check on each grid/choice combination (up to ``limit``)."""
    workload = workloads.get(experiment.workload)
    check = workload.preflight_check()
    if check is None:
        return
    listed = {
        key: args
        for key, spec in experiment.search.items()
        for kind, args in spec.items()
        if kind in ("grid", "choice")
    }
    for combo in itertools.islice(itertools.product(*listed.values()), limit):
        values = search_space.with_variant({**experiment.config, **dict(zip(listed, combo))})
        check(from_dict(workload.config_class(), values, experiment.source, "config"))


def check_storage(storage: str) -> None:
    """Fail early on a local storage path that cannot be written (URIs pass through to Ray)."""
    if "://" in storage:
        return
    path = Path(storage).expanduser().absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"--storage {storage}: '{probe}' is not a writable directory")


# ----------------------------------------------------------------------------- trainables


def trial_settings(experiment: Experiment) -> dict[str, Any]:
    """What a trial needs to know besides its config (all plain values, pickled to workers)."""
    return {
        "loop": workloads.get(experiment.workload).loop,
        "checkpoint_every": experiment.checkpoint.every,
        "keep": experiment.checkpoint.keep,
        "mode": experiment.mode,
    }


def run_trial(settings: dict[str, Any], backend: str, config: dict[str, Any]) -> None:
    """Run a workload's train loop in a Tune trial or a Train worker (module level: picklable)."""
    session.start(
        backend=backend,
        checkpoint_every=settings["checkpoint_every"],
        keep=settings["keep"],
        mode=settings["mode"],
    )
    loop = workloads.Workload(config="", loop=settings["loop"]).train_loop()
    loop(search_space.with_variant(config))


def drive_train_run(settings: dict[str, Any], config: dict[str, Any]) -> None:
    """A Tune trial that runs the loop on Ray Train workers (several workers, or GPUs)."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    context = tune.get_context()
    trainer = TorchTrainer(
        functools.partial(run_trial, settings, "train"),
        train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(
            num_workers=settings["workers"],
            use_gpu=settings["gpus_per_worker"] > 0,
            resources_per_worker={
                "CPU": settings["cpus_per_worker"],
                **({"GPU": settings["gpus_per_worker"]} if settings["gpus_per_worker"] else {}),
            },
        ),
        run_config=ray.train.RunConfig(
            # A stable name: a restarted trial finds its Train run and its latest checkpoint.
            name=context.get_trial_id(),
            storage_path=settings["train_storage"],
            callbacks=[TuneReportCallback()],
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=settings["keep"]),
            failure_config=ray.train.FailureConfig(max_failures=settings["max_failures"]),
        ),
    )
    trainer.fit()


def make_trainable(experiment: Experiment, run_path: str) -> Callable:
    """The Tune trainable for ``experiment``, with its resource request attached."""
    from ray import tune

    settings = trial_settings(experiment)
    resources = experiment.resources
    if not resources.uses_ray_train:
        def trainable(config):
            run_trial(settings, "tune", config)

        request = {"CPU": resources.cpus_per_worker}
    else:
        settings |= {
            "workers": resources.workers,
            "cpus_per_worker": resources.cpus_per_worker,
            "gpus_per_worker": resources.gpus_per_worker,
            "max_failures": experiment.failure.max_failures,
            "train_storage": f"{run_path}/{RUN_INTERNAL}/train",
        }
        def trainable(config):
            drive_train_run(settings, config)

        # The driver only waits on the Train run, whose workers hold the CPUs and GPUs; Ray
        # refuses an empty request, so the driver asks for a nominal byte of memory.
        request = {"CPU": 0, "memory": 1}
    trainable.__name__ = experiment.workload
    return tune.with_resources(trainable, request)


def resolved_config_callback(experiment: Experiment):
    """A Tune callback that writes each trial's full config (defaults filled) as ``config.yaml``."""
    from ray import tune

    config_cls = workloads.get(experiment.workload).config_class()

    class WriteResolvedConfig(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            storage = trial.storage
            config = search_space.with_variant(trial.config)
            resolved = to_dict(from_dict(config_cls, config, experiment.source, "config"))
            with storage.storage_filesystem.open_output_stream(
                f"{storage.trial_fs_path}/config.yaml"
            ) as f:
                f.write(yaml_io.dumps(resolved).encode())

    return WriteResolvedConfig()


def make_scheduler(experiment: Experiment):
    """The Tune scheduler the experiment names."""
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
            (kind, args), = search_space.normalize(entry, experiment.source, key).items()
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


# ----------------------------------------------------------------------------- sweeps


def default_run_name(experiment: Experiment) -> str:
    """``NAME[-smoke]-YYYYmmdd-HHMMSS``: new runs never mix with old ones."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{experiment.name}{'-smoke' if experiment.smoke else ''}-{stamp}"


def storage_root(storage: str) -> str:
    """``--storage`` as an absolute path, or the URI as given."""
    return storage if "://" in storage else str(Path(storage).expanduser().absolute())


def find_run_to_resume(storage: str, experiment_name: str, smoke: bool, name: str | None) -> str:
    """The run folder ``--resume`` continues: ``--name``, else the newest run of the experiment."""
    from ray import tune

    if name:
        path = f"{storage.rstrip('/')}/{name}"
        if not tune.Tuner.can_restore(path):
            raise UserError(f"--resume: no resumable sweep at {path}")
        return path
    if "://" in storage:
        raise UserError("--resume with a cloud --storage needs --name (the run folder to resume)")
    prefix = f"{experiment_name}{'-smoke' if smoke else ''}-"
    root = Path(storage)
    runs = sorted(
        (p for p in root.glob(f"{prefix}*") if p.name[len(prefix):][:8].isdigit()),
        key=lambda p: p.name,
        reverse=True,
    ) if root.is_dir() else []
    for run in runs:
        if tune.Tuner.can_restore(str(run.absolute())):
            return str(run.absolute())
    raise UserError(f"--resume: no resumable run of '{prefix[:-1]}' in {root.absolute()}")


def saved_experiment(run_path: str) -> Experiment:
    """The experiment a run folder was started with (its ``experiment.yaml``)."""
    path = Path(run_path) / EXPERIMENT_FILE
    raw = yaml_io.load(path)
    name, smoke = raw.pop("name"), raw.pop("smoke")
    raw.pop("source", None)
    return validate(raw, name=name, source=str(path), smoke=smoke)


def sweep(
    experiment: Experiment,
    storage: str = "results",
    name: str | None = None,
    resume: bool = False,
    verbose: int = 1,
):
    """Run (or resume) the sweep; return ``(ResultGrid, run_path, experiment)``.

    Ray must be connected (``connect``). With ``resume``, the run folder's saved experiment is
    used and the sweep continues: finished trials are kept, unfinished and errored ones resume
    from their checkpoints.
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
        experiment = saved_experiment(run_path) if "://" not in run_path else experiment
        tuner = tune.Tuner.restore(
            run_path,
            trainable=make_trainable(experiment, run_path),
            resume_unfinished=True,
            resume_errored=True,
        )
        return tuner.fit(), run_path, experiment

    run_name = name or default_run_name(experiment)
    run_path = f"{storage_uri}/{run_name}"
    available = ray.cluster_resources()
    max_concurrent = experiment.max_concurrent_trials or (
        fitting_trials(experiment, available) if experiment.resources.uses_ray_train else 0
    )
    tuner = tune.Tuner(
        make_trainable(experiment, run_path),
        param_space={**experiment.config, **search_space.to_tune(experiment.search)},
        tune_config=tune.TuneConfig(
            metric=experiment.metric,
            mode=experiment.mode,
            scheduler=make_scheduler(experiment),
            num_samples=experiment.num_samples,
            max_concurrent_trials=max_concurrent or None,
            reuse_actors=not experiment.resources.uses_ray_train,
        ),
        run_config=tune.RunConfig(
            name=run_name,
            storage_path=storage_uri,
            stop=dict(experiment.stop) or None,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=experiment.checkpoint.keep),
            failure_config=tune.FailureConfig(max_failures=experiment.failure.max_failures),
            callbacks=[resolved_config_callback(experiment)],
            verbose=verbose,
        ),
    )
    _write_text(run_path, EXPERIMENT_FILE, yaml_io.dumps(experiment.to_yaml_dict()))
    return tuner.fit(), run_path, experiment


def _write_text(run_path: str, filename: str, text: str) -> str:
    """Write a file into the run folder, local or on cloud storage; return its path."""
    if "://" not in run_path:
        Path(run_path).mkdir(parents=True, exist_ok=True)
        target = Path(run_path) / filename
        target.write_text(text)
        return str(target)
    import pyarrow.fs

    fs, path = pyarrow.fs.FileSystem.from_uri(run_path)
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/{filename}") as f:
        f.write(text.encode())
    return f"{run_path}/{filename}"
