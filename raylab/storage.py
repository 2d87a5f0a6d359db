"""Where a sweep's results go: a local folder, or a cloud URI (``s3://``, ``gs://``).

A URI may carry pyarrow filesystem options as a query string, for S3-compatible stores (MinIO,
Ceph, a lab's own store)::

    s3://bucket/runs?endpoint_override=http://10.0.0.5:9000&scheme=http

``join`` keeps that query string at the end when a run name or a file name is appended, so
every path raylab and Ray derive from ``--storage`` reaches the same store.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from raylab.errors import UserError


def is_uri(storage: str) -> bool:
    """Whether ``storage`` names a filesystem by scheme (``s3://``, ``gs://``, ``file://``)."""
    return "://" in storage


def root(storage: str) -> str:
    """``storage`` as an absolute local path, or the URI as given."""
    return storage if is_uri(storage) else str(Path(storage).expanduser().absolute())


def join(base: str, *parts: str) -> str:
    """``base/part/...``; on a URI the parts go into the path, before any ``?query``.

    >>> join("s3://b/runs?endpoint_override=http://127.0.0.1:9000", "run-1", "x.yaml")
    's3://b/runs/run-1/x.yaml?endpoint_override=http://127.0.0.1:9000'
    """
    path, sep, query = base.partition("?") if is_uri(base) else (base, "", "")
    for part in parts:
        path = f"{path.rstrip('/')}/{part.strip('/')}"
    return f"{path}{sep}{query}"


def filesystem(location: str):
    """The pyarrow filesystem of a local folder or a URI, and the path on it.

    A URI's ``?query`` configures the filesystem (``pyarrow.fs.FileSystem.from_uri``); a local
    path comes back absolute."""
    import pyarrow.fs

    if is_uri(location):
        return pyarrow.fs.FileSystem.from_uri(location)
    return pyarrow.fs.LocalFileSystem(), root(location)


CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION", "AWS_REGION",
)
"""The environment variables through which pyarrow's S3 filesystem finds a store's credentials
and region, besides ``AWS_ENDPOINT_URL`` and its per-service forms (``AWS_ENDPOINT_URL_S3``)."""


def credential_env(storage: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The storage credentials set in ``environ`` (default: this process's environment), to
    hand to every trial through the job's ``runtime_env`` on a joined cluster.

    Only for a URI (a local folder needs none), and only the variables that are set: a node's
    own instance role then still applies where the driver has no keys. The values never reach
    a saved file: ``runtime_env`` is not part of what Tune saves in the run folder.
    """
    environ = os.environ if environ is None else environ
    if not is_uri(storage):
        return {}
    return {key: value for key, value in environ.items()
            if value and (key in CREDENTIAL_ENV or key.startswith("AWS_ENDPOINT_URL"))}


def name_of(run_path: str) -> str:
    """The last path element of a run folder (its run name), query string ignored."""
    path = run_path.partition("?")[0] if is_uri(run_path) else run_path
    return path.rstrip("/").rsplit("/", 1)[-1]


def parent(location: str) -> str:
    """The folder that holds ``location`` (a run folder's storage root), a URI's query kept.

    >>> parent("s3://b/runs/run-1?endpoint_override=http://127.0.0.1:9000")
    's3://b/runs?endpoint_override=http://127.0.0.1:9000'
    """
    path, sep, query = location.partition("?") if is_uri(location) else (location, "", "")
    return f"{path.rstrip('/').rsplit('/', 1)[0]}{sep}{query}"


def scheme(storage: str) -> str:
    """The URI scheme (``s3``, ``gs``, ...), or ``""`` for a local path."""
    return urlsplit(storage).scheme if is_uri(storage) else ""


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
        raise UserError(
            f"--storage {storage}: '{probe}' is not a writable directory ({err.strerror or err})"
        ) from None


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
        raise UserError(f"--storage {storage}: cannot connect to its endpoint_override "
                        f"{parts.hostname}:{port} ({err.strerror or err})") from None


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
