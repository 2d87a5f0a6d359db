"""Checks run before Ray starts: resources, the workload's preflight, the run's name, storage.

Storage is probed with a real round trip: a local folder must take a file, a URI a marker
object written, read back and deleted through the filesystem layer Ray Tune uses on it.
"""

from __future__ import annotations

import itertools
import math
import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from raylab import search_space, workloads
from raylab.config import from_dict
from raylab.errors import UserError
from raylab.experiment import Experiment
from raylab.run_folder import RunFolder, filesystem, is_uri, join


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


def check_run_name(run: RunFolder) -> None:
    """``--name`` of a run that exists would write a second sweep into its folder: refuse."""
    if run.exists():
        raise UserError(
            f"--name {run.name}: a run already exists at {run.location}; continue it with --resume, "
            f"or choose another name"
        )


def check_storage(run: RunFolder, joined: bool = False, shared: bool = False) -> None:
    """Fail before Ray starts on a ``--storage`` that cannot hold the run folder ``run``.

    A local folder must take a file (created and removed again); on a joined cluster
    (``joined``) it must also be declared ``shared`` (mounted by every node), else it is
    refused. A URI must take a marker object (written, read back and deleted within seconds).
    """
    storage = run.storage_root
    if is_uri(storage):
        probe_uri(storage)
        return
    probe_local(storage)
    if joined:
        refuse_unshared_local(storage, shared)


def probe_local(storage: str) -> None:
    """Fail early on a local ``--storage`` that cannot hold results.

    The nearest existing folder is written to: a file is created there and removed again
    (permission bits alone can lie, as on ``/proc``, read-only mounts or root-squashed NFS).
    """
    path = Path(storage).expanduser().absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"--storage {storage}: '{probe}' is not a writable directory")
    marker = probe / f".raylab-write-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        marker.touch(exist_ok=False)
        marker.unlink()
    except OSError as err:
        raise UserError(f"--storage {storage}: '{probe}' is not a writable directory ({err.strerror or err})") from None


def probe_uri(storage: str, timeout_s: float = 12.0) -> None:
    """Fail early on a ``--storage`` URI that cannot hold results: a real round trip.

    A marker object is written under the URI, read back and deleted through the filesystem
    layer Ray Tune itself uses on it (``pyarrow.fs.FileSystem.from_uri``), within ``timeout_s``:
    a wrong endpoint, a missing bucket or missing credentials fail here, in one line, instead
    of as a traceback once Ray has started. Nothing is left behind on success.
    """
    _check_endpoint(storage, min(timeout_s, 3.0))
    marker = join(storage, f".raylab-write-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    payload = b"raylab storage check"

    def round_trip() -> None:
        import pyarrow.fs

        fs, path = filesystem(marker)
        _, base = filesystem(storage)
        existed = fs.get_file_info(base).type != pyarrow.fs.FileType.NotFound
        with fs.open_output_stream(path) as out:
            out.write(payload)
        with fs.open_input_stream(path) as back:
            if back.read() != payload:
                raise OSError("the marker read back differs from what was written")
        fs.delete_file(path)
        if not existed and "/" in base.strip("/"):  # the folder the deletion left (not a bucket)
            fs.delete_dir(base)

    within(timeout_s, f"--storage {storage}", round_trip)


def _check_endpoint(storage: str, timeout_s: float) -> None:
    """A URI's ``endpoint_override`` must accept a connection (pyarrow would retry for seconds)."""
    import socket
    from urllib.parse import parse_qs

    endpoint = parse_qs(storage.partition("?")[2]).get("endpoint_override", [""])[0]
    if not endpoint:
        return
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except OSError as err:
        raise UserError(
            f"--storage {storage}: cannot connect to its endpoint_override "
            f"{parts.hostname}:{port} ({err.strerror or err})"
        ) from None


def within(timeout_s: float, what: str, check) -> None:
    """Run ``check()`` in a daemon thread; its exception, or no answer in ``timeout_s``, is a
    ``UserError`` starting with ``what`` and holding the exception's last line."""
    import threading

    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            check()
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - reported as one line below
            outcome.append(err)

    thread = threading.Thread(target=run, name="raylab-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise UserError(f"{what}: no answer within {timeout_s:g} s")
    if outcome[0] is not None:
        raise UserError(f"{what}: {last_line(outcome[0])}") from None


def last_line(err: BaseException) -> str:
    """An exception as one line: its type and the last non-empty line of its message."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}".rstrip(": ")


def refuse_unshared_local(storage: str, shared: bool) -> None:
    """On a joined cluster, refuse a local ``--storage`` that is not declared shared.

    Ray Train persists each checkpoint from the node its trial runs on, and refuses a local
    storage folder that this node's marker file is missing from, so an unshared folder fails
    every trial at its first checkpoint on any other node. Whether a joined cluster has one
    node or can add more (an autoscaler) is not visible through Ray's public API, so any
    joined cluster is treated as multi-node.
    """
    if is_uri(storage) or shared:
        return
    raise UserError(
        f"--storage {storage}: a local folder is only on this node, and trials on other "
        "nodes of the cluster cannot checkpoint there; use --storage s3://BUCKET/PATH (or "
        "gs://), or add --shared-storage if that folder is on a filesystem every node mounts "
        "(NFS) at the same path"
    )
