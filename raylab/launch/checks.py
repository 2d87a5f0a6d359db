"""Checks run before Ray starts: resources, the workload's preflight, the run's name, storage.

Storage is probed with a real round trip: a local folder must take a file, a URI a marker
object written, read back and deleted through the filesystem layer Ray Tune uses on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import math
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from raylab import search_space, workloads
from raylab.config import from_dict, with_variant
from raylab.errors import ThisMachine, UserError
from raylab.experiment import SPOT_RESOURCE, Experiment
from raylab.files import LAUNCH_DIR_ENV, is_uri, refuse_credentials
from raylab.run_folder import RunFolder, filesystem, join


def check_resources(experiment: Experiment, available: dict[str, float], local: bool) -> None:
    """Refuse a trial that this cluster can never run, instead of leaving it pending forever.

    On a local Ray the check is against this machine; on a joined cluster a shortfall is only
    warned about, since an autoscaler may still add the nodes.
    """
    resources = experiment.resources
    for name, per_worker in resources.worker_request().items():
        have = available.get(name, 0.0)
        if per_worker <= 0 or per_worker * resources.workers <= have:
            continue
        message = (
            f"{experiment.source}: resources ask for {resources.workers} worker(s) x "
            f"{per_worker:g} {name} per trial, but this {'machine' if local else 'cluster'} has "
            f"{have:g} {name}"
        )
        if local and name == SPOT_RESOURCE:
            hint = (
                " (resources.spot or --spot: trials run on spot node types, which declare it; run on "
                "such a cluster, cluster/gpu.yaml, with --address, or drop --spot here; its spot nodes need "
                "the account's spot vCPU quota, 'All G and VT Spot Instance Requests' L-3819A6DF for g5, "
                "often 0 on a new account)"
            )
            raise UserError(message + hint)
        if local:
            here = fitting_experiments(experiment, available)
            hint = (
                " (--smoke runs the small version here"
                + (f"; {', '.join(here)} run{'s' if len(here) == 1 else ''} on this machine in full" if here else "")
                + "; --cluster cluster/gpu.yaml with --dry-run plans it for a cluster; --address runs it on one"
                + f"{' with GPUs' if name == 'GPU' else ''})"
            )
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


def fitting_experiments(experiment: Experiment, available: dict[str, float]) -> list[str]:
    """The other experiments of ``experiment``'s workload whose trials fit ``available`` (this
    machine) at full size, no GPU asked: what a refused newcomer can run here instead."""
    from raylab import experiment as experiments

    names = []
    for name in experiments.available():
        if name == experiment.name:
            continue
        try:
            other = experiments.load(name)
        except UserError:
            continue
        total = other.resources.total()
        if other.workload == experiment.workload and not total["GPU"] and total["CPU"] <= available.get("CPU", 0):
            names.append(name)
    return names


def preflight(experiment: Experiment, limit: int = 256, head: bool = False) -> str:
    """Refuse a workload whose packages are missing (its ``requires``, naming its extra), then
    run its preflight check on each grid/choice combination (up to ``limit``).

    ``head``: run it as a cluster's head would (``--dry-run --cluster``): relative paths resolve
    in the cluster's file set (``cluster_file_set``: the checkout less what .gitignore lists,
    what ``ray up`` syncs and the image carries, so no ``data/``), and a refusal about this
    machine's own memory (``ThisMachine``) is not counted: trials run on the nodes, whose memory
    the plan checks. Returns that refusal's text, or "" (raises ``UserError`` for the rest)."""
    workload = workloads.get(experiment.workload)
    workload.check_requires(experiment.workload)  # before the preflight's module is imported
    check = workload.preflight_check()
    if check is None:
        return ""
    listed = {
        key: args
        for key, spec in experiment.search.items()
        for kind, args in spec.items()
        if kind in ("grid", "choice")
    }
    combos = itertools.islice(itertools.product(*listed.values()), limit)
    configs = (
        from_dict(
            workload.config_class(),
            with_variant({**experiment.config, **dict(zip(listed, c))}),
            experiment.source,
            "config",
        )
        for c in combos
    )
    if not head:
        for cfg in configs:
            check(cfg)
        return ""
    machine = ""
    with cluster_file_set() as folder, _launch_dir(folder):
        for cfg in configs:
            try:
                check(cfg)
            except ThisMachine as err:
                machine = machine or str(err)
            except UserError as err:
                raise UserError(
                    "on the cluster's head (HEAD: its launch folder, the checkout less what .gitignore "
                    f"lists; stage data to the run's bucket, config.data_dir=s3://...): {str(err).replace(folder, 'HEAD')}"
                ) from None
    return machine


@contextlib.contextmanager
def _launch_dir(folder: str):
    """Relative paths (``raylab.files.user_path``) resolve in ``folder`` meanwhile."""
    saved = os.environ.get(LAUNCH_DIR_ENV)
    os.environ[LAUNCH_DIR_ENV] = folder
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(LAUNCH_DIR_ENV, None)
        else:
            os.environ[LAUNCH_DIR_ENV] = saved


@contextlib.contextmanager
def cluster_file_set(launch_dir: str | None = None):
    """A temporary folder holding what a cluster's head has of ``launch_dir`` (the current
    folder): in a git checkout its files less what .gitignore lists (``git ls-files --cached
    --others --exclude-standard``), which is what ``ray up``'s sync (cluster/gpu.yaml's
    rsync_filter) and the image's build context (cluster/Dockerfile.dockerignore, a superset of
    those exclusions for data) leave out; elsewhere nothing. Files are symbolic links."""
    import subprocess
    import tempfile

    source = Path(launch_dir or os.getcwd())
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=source,
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout.decode(errors="replace")
        files = [f for f in listed.split("\0") if f]
    except (OSError, subprocess.SubprocessError):
        files = []
    with tempfile.TemporaryDirectory(prefix="raylab-head-files-") as folder:
        for rel in files:
            if (source / rel).is_file():
                target = Path(folder) / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(source / rel)
        yield folder


def refuse_credential_values(experiment: Experiment) -> None:
    """Refuse a config or search value that is a URI holding credentials (``config.data_dir=
    s3://KEY:SECRET@bucket/...``): the dry run prints the config and the run folder saves it."""

    def walk(value, where: str) -> None:
        if isinstance(value, str):
            refuse_credentials(value, where)
        elif isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{where}.{key}")
        elif isinstance(value, (list, tuple)):
            for inner in value:
                walk(inner, where)

    walk(experiment.config, "config")
    walk(experiment.search, "search")


MALFORMED_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(?!//)")
"""A scheme followed by ``:`` but not ``://`` (``s3:/bucket``, ``gs:bucket``): taken as a local
path, it would make a folder named ``s3:`` in the working directory."""


def check_storage_syntax(storage: str) -> None:
    """Refuse a ``--storage`` that looks like a URI with a malformed scheme part.

    ``s3:/bucket`` or ``gs:bucket`` is not a URI (that needs ``://``) and, read as a local path,
    would silently write to a folder named ``s3:``. A local folder whose name holds a colon is
    still possible as ``./s3:x``. A URI that holds credentials is refused without printing it
    (``raylab.files.refuse_credentials``).
    """
    refuse_credentials(storage)
    found = MALFORMED_URI.match(storage)
    if not found:
        return
    scheme, rest = found.group(1), storage[found.end() :]
    meant = f"{scheme}:///{rest.lstrip('/')}" if scheme.lower() == "file" else f"{scheme}://{rest.lstrip('/')}"
    raise UserError(
        f"--storage {storage}: malformed URI (a scheme needs '://'; did you mean {meant}?); "
        f"a local folder whose name holds ':' is written ./{storage}"
    )


def check_name_syntax(name: str | None) -> None:
    """``--name`` must be one folder name: a printable path segment inside ``--storage``.

    Refused: empty, ``.`` or ``..``, a ``/`` or ``\\`` (it would nest, or with ``..`` escape the
    storage folder), a ``?`` or ``#`` (they end a URI's path), and control characters.
    """
    if name is None:
        return
    problem = None
    if not name.strip():
        problem = "it is empty"
    elif name in (".", ".."):
        problem = f"'{name}' is not a folder of its own"
    elif any(c in name for c in "/\\"):
        problem = "it holds a path separator (it would nest, or with '..' leave --storage)"
    elif any(c in name for c in "?#"):
        problem = "it holds '?' or '#', which end the path of a storage URI"
    elif not name.isprintable():
        problem = "it holds a control character"
    if problem:
        raise UserError(f"--name {name!r}: a run name must be one folder name; {problem}")


def check_run_name(run: RunFolder) -> None:
    """``--name`` of a run that exists would write a second sweep into its folder: refuse."""
    if run.exists():
        raise UserError(
            f"--name {run.name}: a run already exists at {run.location}; continue it with --resume, "
            f"or choose another name"
        )


@dataclass(frozen=True)
class CheckpointNeed:
    """The disk the estimate says a sweep's kept checkpoints take: ``trials`` x ``kept`` x
    ``checkpoint_bytes`` (``--dry-run``'s cost lines and the storage probe share it)."""

    trials: int
    kept: int | None
    """``checkpoint.keep`` (None: all are kept, counted as at least 1)."""
    checkpoint_bytes: float
    """``estimate.checkpoint_bytes``: one checkpoint of one trial."""

    @property
    def total(self) -> float:
        return self.trials * (self.kept if self.kept is not None else 1) * self.checkpoint_bytes


def checkpoint_need(experiment: Experiment) -> CheckpointNeed | None:
    """What ``experiment``'s kept checkpoints take, by its ``estimate`` section; None when the
    file states no ``checkpoint_bytes``."""
    if not experiment.estimate.checkpoint_bytes:
        return None
    trials = search_space.grid_size(experiment.search) * experiment.num_samples
    return CheckpointNeed(trials, experiment.checkpoint.keep, experiment.estimate.checkpoint_bytes)


def storage_need(experiment: Experiment, resume: bool = False, trials: int | None = None) -> CheckpointNeed | None:
    """The checkpoint bytes the storage probe compares with the free space (``trials`` in
    place of the sweep's, for ``raylab.train``'s one): none for a smoke run (the estimate is
    the full run's) or a resumed one (part of it is on disk already)."""
    need = None if experiment.smoke or resume else checkpoint_need(experiment)
    return dataclasses.replace(need, trials=trials) if need and trials is not None else need


def check_storage(
    run: RunFolder, joined: bool = False, shared: bool = False, need: CheckpointNeed | None = None
) -> None:
    """Fail before Ray starts on a ``--storage`` that cannot hold the run folder ``run``.

    A local folder must take a non-empty file (written, read back and removed again) and, with
    ``need`` (``storage_need``), have that many bytes free; on a joined cluster (``joined``) it
    must also be declared ``shared`` (mounted by every node), else it is refused. A URI must take
    a marker object (written, read back and deleted within seconds).
    """
    storage = run.storage_root
    check_storage_syntax(storage)
    if is_uri(storage):
        probe_uri(storage)
        return
    probe_local(storage, need)
    if joined:
        refuse_unshared_local(storage, shared)


MARKER = b"raylab storage check\n" * 200
"""What the probes write: 4 KB, a whole filesystem block (an empty file takes no block, and is
written on a disk that is full)."""


def probe_local(storage: str, need: CheckpointNeed | None = None) -> None:
    """Fail early on a local ``--storage`` that cannot hold results.

    The nearest existing folder is written to: a non-empty file is written there, read back and
    removed again (permission bits alone can lie, as on ``/proc``, read-only mounts or
    root-squashed NFS; an empty file is created even on a full disk). With ``need``, the disk's
    free space must hold the estimate's checkpoints.
    """
    path = Path(storage).expanduser().absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"--storage {storage}: '{probe}' is not a writable directory")
    marker = probe / f".raylab-write-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with open(marker, "xb") as out:
            out.write(MARKER)
            out.flush()
            os.fsync(out.fileno())
        if marker.read_bytes() != MARKER:
            raise OSError(errno.EIO, "the marker read back differs from what was written")
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise UserError(f"--storage {storage}: the disk holding '{probe}' is full ({err.strerror})") from None
        raise UserError(f"--storage {storage}: '{probe}' is not a writable directory ({err.strerror or err})") from None
    finally:
        with contextlib.suppress(OSError):  # on a read-only disk the unlink itself raises EROFS
            marker.unlink(missing_ok=True)
    if need is not None:
        free = shutil.disk_usage(probe).free
        if free < need.total:
            kept = need.kept if need.kept is not None else "all (at least 1)"
            raise UserError(
                f"--storage {storage}: {human_bytes(free)} free on the disk holding '{probe}', but the "
                f"checkpoints kept need {need.trials} trials x {kept} x {human_bytes(need.checkpoint_bytes)} "
                f"= {human_bytes(need.total)} (estimate.checkpoint_bytes, checkpoint.keep); {storage_hint(need, free)}"
            )


def storage_hint(need: CheckpointNeed, free: float) -> str:
    """What would fit in ``free`` bytes: the most checkpoints per trial that fit
    (``checkpoint.keep=K`` with ``trials x K x checkpoint_bytes <= free``), else how much a
    storage needs for one checkpoint per trial, and the flags that plan or run it elsewhere."""
    per_keep = need.trials * need.checkpoint_bytes
    fitting = math.floor(free / per_keep) if per_keep > 0 else 0
    if fitting >= 1 and (need.kept is None or fitting < need.kept):
        return f"checkpoint.keep={fitting} fits ({human_bytes(fitting * per_keep)}), or choose another --storage"
    return (
        f"even checkpoint.keep=1 needs {human_bytes(per_keep)}: choose a --storage with that much free "
        "(a bucket, s3://BUCKET/runs), plan it for a cluster with --cluster cluster/gpu.yaml, or run the "
        "small version here with --smoke"
    )


def human_bytes(count: float) -> str:
    """``7.0 GB``: a byte count in decimal units."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:,.1f} {unit}" if unit != "B" else f"{count:,.0f} B"
        count /= 1000
    return f"{count:,.1f} TB"


def probe_uri(storage: str, timeout_s: float = 12.0) -> None:
    """Fail early on a ``--storage`` URI that cannot hold results: a real round trip.

    A marker object is written under the URI, read back and deleted through the filesystem
    layer Ray Tune itself uses on it (``pyarrow.fs.FileSystem.from_uri``), within ``timeout_s``:
    a wrong endpoint, a missing bucket or missing credentials fail here, in one line, instead
    of as a traceback once Ray has started. Nothing is left behind on success.
    """
    _check_endpoint(storage, min(timeout_s, 3.0))
    marker = join(storage, f".raylab-write-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    payload = MARKER

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
    parts = urlsplit(endpoint if is_uri(endpoint) else f"http://{endpoint}")
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
