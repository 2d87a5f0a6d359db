"""Starting a local Ray sized to this machine, or joining a cluster; what a local Ray would have."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
from typing import Any

from raylab.errors import UserError
from raylab.files import is_uri
from raylab.launch import storage_secrets

# Ray's documented switch between a single-machine Ray (the default on macOS and Windows) and one
# other machines may join; read once, when Ray is first imported.
SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def cluster_address(address: str | None) -> str | None:
    """The cluster to join: ``address``, else the one ``ray job submit`` names in RAY_ADDRESS."""
    return address or os.environ.get("RAY_ADDRESS") or None


def bind_to_loopback_unless_asked(argv: list[str], environ: dict[str, str] | None = None) -> bool:
    """Make the local Ray this command may start listen on 127.0.0.1 only; True if it will.

    On Linux a local ``ray.init()`` takes the machine's reachable IP as its node address, and the
    GCS, the raylet and every worker then listen on all interfaces, on a laptop too. With
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` Ray treats the machine as it treats a Mac: the node
    address is 127.0.0.1 and every server binds there (the dashboard is told separately, in
    ``connect``). Ray reads the variable when it is first imported, so the CLI modules call this
    with their arguments before importing anything that imports Ray. Nothing changes with
    ``--listen``, with a cluster to join (``--address``, ``RAY_ADDRESS``: the driver must be
    reachable from the cluster), when the user set the variable, or once Ray is imported.
    """
    import argparse

    environ = os.environ if environ is None else environ
    wants = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    wants.add_argument("--listen", action="store_true")
    wants.add_argument("--address")
    asked, _ = wants.parse_known_args(argv)
    if asked.listen or asked.address or environ.get("RAY_ADDRESS") or "ray" in sys.modules:
        return False
    environ.setdefault(SINGLE_MACHINE_ENV, "0")
    return environ[SINGLE_MACHINE_ENV] == "0"


def connect(
    address: str | None = None,
    dashboard: bool = False,
    state_api: bool = False,
    listen: bool = False,
    quiet: bool = False,
    env_vars: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Start a local Ray sized to this machine, or join ``address`` (``auto`` or ``HOST:PORT``).

    Returns what the caller may print: whether Ray was started here, the dashboard URL (with
    ``dashboard``) and, when ``quiet``, the file Ray's pushed messages go to (``ray_messages``). ``state_api`` starts the dashboard process without announcing it:
    Ray Train's controller polls Ray's state API, which that process serves. An address that
    does not answer fails within seconds. A local Ray's dashboard listens on 127.0.0.1 only,
    unless ``listen`` (all interfaces); its other servers too when the CLI called
    ``bind_to_loopback_unless_asked`` first. ``quiet`` keeps Ray's own lines below ERROR, the
    workers' output, the messages raylets push to the driver and Ray's tracebacks off the
    console (``console_level``, ``log_to_driver``, ``divert_ray_messages``, ``quiet_ray_console``). ``env_vars`` (a joined cluster only,
    whose nodes were started without this shell's environment) reach every worker process of
    the sweep, Tune trials and Ray Train workers alike, through the job's worker setup hook
    (``storage_secrets.worker_hook``: keys in a credentials file on each node), not its
    ``env_vars``, which Ray lists with the job (the dashboard's Jobs page).
    """
    import ray

    if quiet:
        quiet_ray_console()
    if ray.is_initialized():
        return {"started": False, "dashboard_url": None, "ray_messages": None}
    address = cluster_address(address)
    if address:
        address, source = resolved_address(address)
        check_reachable(address, source)
        try:
            context = ray.init(
                address=address,
                logging_level=console_level(quiet),
                log_to_driver=not quiet,
                **(
                    {"runtime_env": {"worker_process_setup_hook": storage_secrets.worker_hook(env_vars)}}
                    if env_vars
                    else {}
                ),
            )
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise UserError(f"cannot join Ray cluster at '{address}': {err}") from None
        messages = divert_ray_messages(context) if quiet else None
        return {"started": False, "dashboard_url": context.dashboard_url, "ray_messages": messages}
    # "local", not None: ray.init() would otherwise join whatever cluster the last `ray start`
    # on this machine recorded in Ray's temp folder, even one long gone (it then hangs).
    port = _state_api_of_this_ray(listen) if dashboard or state_api else None
    context = init_local_retrying(
        address="local",
        include_dashboard=dashboard or state_api,
        dashboard_host="0.0.0.0" if listen else "127.0.0.1",
        **({"dashboard_port": port} if port else {}),
        logging_level=console_level(quiet),
        log_to_driver=not quiet,
    )
    messages = divert_ray_messages(context) if quiet else None
    url = f"http://{context.dashboard_url}" if dashboard and context.dashboard_url else None
    if url and listen:
        url = url.replace("0.0.0.0", socket.gethostname(), 1)
    return {"started": True, "dashboard_url": url, "ray_messages": messages}


STARTUP_TIMEOUT = "timed out during startup"
"""Ray's words (``ray._private.node``, a plain Exception) when the raylet does not register with
the GCS within 30 s, which happens on a heavily loaded machine."""


def init_local_retrying(**kwargs) -> Any:
    """``ray.init(**kwargs)`` for a local Ray, started again once if the node times out during
    startup (the processes of the failed attempt are stopped first); a second timeout is a
    ``UserError`` naming the cause, one line."""
    import ray

    for attempt in (1, 2):
        try:
            return ray.init(**kwargs)
        except Exception as err:  # Ray raises a bare Exception here
            if STARTUP_TIMEOUT not in str(err):
                raise
            ray.shutdown()
            if attempt == 2:
                raise UserError(
                    "the local Ray did not start: its node timed out during startup twice (the raylet "
                    "did not register with Ray's GCS within 30 s; this machine is probably overloaded); "
                    "retry when the load is lower, or join a running Ray with --address"
                ) from None
            print("the local Ray timed out during startup; starting it once more", file=sys.stderr, flush=True)


API_SERVER_ENV = "RAY_API_SERVER_ADDRESS"


def _state_api_of_this_ray(listen: bool) -> int | None:
    """Choose the local Ray's dashboard port and name it in ``RAY_API_SERVER_ADDRESS``.

    Ray Train's controller and its helper actors (the PlacementGroupCleaner, the state actor)
    call Ray's state API without an address; Ray then looks for the cluster by scanning this
    machine's processes, and with a second local Ray running (another sweep) fails with "Found
    multiple active Ray instances". Ray's state API reads ``RAY_API_SERVER_ADDRESS`` first, and
    every Ray process inherits it from this one when it is set before ``ray.init``, so each
    sweep's actors talk to their own Ray only. A value the user set is kept (None returned).
    """
    if os.environ.get(API_SERVER_ENV):
        return None
    with socket.socket() as s:
        s.bind(("0.0.0.0" if listen else "127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ[API_SERVER_ENV] = f"http://127.0.0.1:{port}"
    return port


def console_level(quiet: bool) -> int:
    """The level of Ray's ``ray`` loggers in this process (``ray.init(logging_level=...)``):
    ERROR when ``quiet``, so that Ray's warnings (its token-authentication notice, Tune's
    "may be a performance bottleneck" lines) stay off the console; WARNING with ``--verbose``."""
    return logging.ERROR if quiet else logging.WARNING


RAY_MESSAGES_THREAD = "ray_listen_error_messages"
"""The thread of the driver in which Ray prints the messages its raylets and GCS push to the
job (``(raylet) WARNING: N PYTHON worker processes have been started ...``, a worker that
died), straight to ``sys.stdout`` in yellow, whatever ``log_to_driver`` says."""
RAY_MESSAGES_FILE = "raylab-ray-messages.log"
"""Where ``divert_ray_messages`` writes them: in the Ray session's ``logs`` folder."""


def divert_ray_messages(context: Any) -> str | None:
    """Write what Ray prints from its message thread (``RAY_MESSAGES_THREAD``) into
    ``RAY_MESSAGES_FILE`` in the session's log folder instead of the console; return that file.

    Ray has no switch for these lines (``log_to_driver=False`` keeps only the workers' output
    away), so this process's ``sys.stdout`` and ``sys.stderr`` pass through a stream that sends
    that one thread's writes to the file; everything else reaches the console unchanged. The
    session folder is ``ray.init``'s ``address_info["session_dir"]``; None when there is none.
    """
    session = (getattr(context, "address_info", None) or {}).get("session_dir")
    if not session:
        return None
    path = os.path.join(session, "logs", RAY_MESSAGES_FILE)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _ThreadToFile):
            setattr(sys, name, _ThreadToFile(stream, RAY_MESSAGES_THREAD, path))
    return path


class _ThreadToFile:
    """A text stream that appends the writes of the thread named ``thread`` to the file ``path``
    and passes all others to ``console``."""

    def __init__(self, console, thread: str, path: str):
        self.console, self.thread, self.path = console, thread, path

    def write(self, text: str) -> int:
        if threading.current_thread().name != self.thread:
            return self.console.write(text)
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a") as f:
                f.write(text)
        except OSError:
            pass  # the console stays quiet; the raylet's own log holds its messages
        return len(text)

    def flush(self) -> None:
        self.console.flush()

    def __getattr__(self, name: str):
        return getattr(self.console, name)


def quiet_ray_console() -> None:
    """Keep Ray's tracebacks, and its lines that repeat raylab's own, off the console.

    A failed trial's traceback is in its ``error.txt`` (raylab's line names it); the workers'
    own output stays in Ray's log files (``log_to_driver=False`` in ``connect``), and Ray's
    warnings are below the level its loggers print at (``console_level``).
    """
    import ray  # noqa: F401 - Ray's console handler exists once Ray is imported

    for handler in logging.getLogger("ray").handlers:
        if _ray_record_for_the_console not in handler.filters:
            handler.addFilter(_ray_record_for_the_console)


REPEATED_BY_RAYLAB = ("Trial task failed for trial", "Trials did not complete")


def _ray_record_for_the_console(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (
        record.exc_info or "Traceback (most recent call last)" in message or message.startswith(REPEATED_BY_RAYLAB)
    )


def dashboard_text(ray_info: dict[str, Any]) -> str:
    """How to open the dashboard: its URL and, when Ray asks for one, where the token is."""
    text = f"Ray dashboard: {ray_info['dashboard_url']}"
    if token_auth_enabled():
        text += (
            "\n  it asks for a token: paste the output of `ray get-auth-token` (this "
            "machine's Ray token) into its prompt once; the browser keeps it in a cookie"
        )
    return text


def token_auth_enabled() -> bool:
    """Whether this Ray asks clients (and the dashboard's browser) for a token.

    Ray 2.60 turns token authentication on for a local ``ray.init()`` unless
    ``RAY_AUTH_MODE`` says otherwise; ``ray.init`` sets the variable for its process.
    """
    return os.environ.get("RAY_AUTH_MODE", "").lower() == "token"


def wait_for_ctrl_c(ray_info: dict[str, Any]) -> None:
    """Keep this process, and so the local Ray and its dashboard, up until Ctrl-C."""
    import signal
    import time

    # Ray Tune's fit() leaves its own SIGINT handler behind (it only flags a stop); Ctrl-C must
    # raise here again.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print(
        f"the dashboard stays up at {ray_info['dashboard_url']}; press Ctrl-C to stop Ray", file=sys.stderr, flush=True
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def ray_address_file(environ: dict[str, str] | None = None) -> str:
    """Where ``ray start`` records the address of the cluster it started on this machine (the
    file ``ray.init(address="auto")`` reads): ``ray/ray_current_cluster`` under Ray's temp
    root, which is ``RAY_TMPDIR``, else ``TMPDIR`` on Linux, else ``/tmp``."""
    environ = os.environ if environ is None else environ
    temp = environ.get("RAY_TMPDIR") or (environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
    return os.path.join(temp or "/tmp", "ray", "ray_current_cluster")


def resolved_address(address: str, environ: dict[str, str] | None = None) -> tuple[str, str | None]:
    """The cluster ``--address auto`` means, resolved as ``ray.init`` resolves it, so that it
    can be checked before Ray waits on it, and where that came from: ``RAY_ADDRESS`` when set,
    else the address the last ``ray start`` on this machine recorded (``ray_address_file``).
    Without either, ``auto`` is left to Ray (it joins a Ray it finds running here, or fails at
    once when there is none). Any other address is returned as given (source None).

    Ray itself waits for minutes on a recorded cluster that has since stopped (a stale address
    file); ``check_reachable`` on the resolved address fails within seconds.
    """
    environ = os.environ if environ is None else environ
    if address != "auto":
        return address, None
    if (from_env := environ.get("RAY_ADDRESS", "")) and from_env != "auto":
        return from_env, "RAY_ADDRESS"
    path = ray_address_file(environ)
    try:
        with open(path) as f:
            recorded = f.read().strip()
    except OSError:
        return address, None
    return (recorded, f"{path}, written by the last `ray start` on this machine") if recorded else (address, None)


def check_reachable(address: str, source: str | None = None, timeout_s: float = 3.0) -> None:
    """Whether the GCS at ``address`` (``HOST:PORT``) accepts a connection within ``timeout_s``;
    else a ``UserError`` in one line, naming where an ``auto`` address came from (``source``)."""
    if address == "auto" or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address '{address}'{f' (from {source})' if source else ''}: expected auto or HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        reason = err.strerror or str(err) or "no answer"
        if source:
            raise UserError(
                f"--address auto: cannot reach Ray cluster at {address} (from {source}): {reason}; start one "
                "with `ray start --head`, or name a running one with --address HOST:PORT"
            ) from None
        raise UserError(f"cannot reach Ray cluster at {address}: {reason}") from None


def local_resources() -> dict[str, float]:
    """CPUs and GPUs of this machine, as a local Ray would see them (without starting Ray).

    On a simulated GPU machine (``RAYLAB_SIMULATED_GPUS=1``) the GPUs are the ones Ray is told
    of with ``RAY_OVERRIDE_RESOURCES`` (its own variable: ``{"GPU": 1}``); the device rehearsal
    (benchmarks/gpu_check.py --rehearse) runs the GPU trials' path that way on a CPU.
    """
    import torch  # counts the GPUs Ray would see (CUDA_VISIBLE_DEVICES respected), publicly

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if os.environ.get("RAYLAB_SIMULATED_GPUS") == "1":
        gpus = max(gpus, json.loads(os.environ.get("RAY_OVERRIDE_RESOURCES") or "{}").get("GPU", 0))
    return {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)}


CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
)
"""The environment variables through which pyarrow's S3 filesystem finds a store's credentials
and region, besides ``AWS_ENDPOINT_URL`` and its per-service forms (``AWS_ENDPOINT_URL_S3``)."""


def credential_env(storage: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The storage credentials set in ``environ`` (default: this process's environment), to
    hand to every trial on a joined cluster (``connect``'s ``env_vars``, through
    ``storage_secrets.worker_hook``).

    Only for a URI (a local folder needs none), and only the variables that are set: a node's
    own instance role then still applies where the driver has no keys (a `ray up` cluster's
    nodes, whose instance profiles reach the bucket: nothing is handed on there). The values
    never reach a saved file: the job's ``runtime_env`` is not part of what Tune saves.
    """
    environ = os.environ if environ is None else environ
    if not is_uri(storage):
        return {}
    return {
        key: value
        for key, value in environ.items()
        if value and (key in CREDENTIAL_ENV or key.startswith("AWS_ENDPOINT_URL"))
    }
