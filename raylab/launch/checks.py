"""Checks run before Ray starts: resources, the workload's preflight, storage."""

from __future__ import annotations

import itertools
import math

from raylab import search_space, workloads
from raylab import storage as storage_paths
from raylab.config import from_dict
from raylab.errors import UserError
from raylab.experiment import Experiment


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
            hint = f" (--smoke runs the small version here; --address runs it on a cluster{' with GPUs' if name == 'GPU' else ''})"
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
    """Refuse a workload whose packages are missing (its ``requires``, naming its extra), then
    run its preflight check on each grid/choice combination (up to ``limit``)."""
    workload = workloads.get(experiment.workload)
    workload.check_requires(experiment.workload)  # before the preflight's module is imported
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


def check_storage(storage: str, joined: bool = False, shared: bool = False) -> None:
    """Fail before Ray starts on a ``--storage`` that cannot work.

    A local folder must take a file (created and removed again); on a joined cluster
    (``joined``) it must also be declared ``shared`` (mounted by every node), else it is
    refused. A URI must take a marker object (written, read back and deleted within seconds).
    """
    if storage_paths.is_uri(storage):
        storage_paths.probe_uri(storage)
        return
    storage_paths.probe_local(storage)
    if joined:
        storage_paths.refuse_unshared_local(storage, shared)
