"""``--logger mlflow|wandb|tensorboard``: checks of each tracker's destination, and the Tune
callbacks that log to it (``raylab.launch.trackers.callbacks``). Every tracker receives each
trial's resolved Config (every field), the run's provenance and its metrics stepped by the
workload's counter (``raylab.launch.trackers.payload``).

- ``mlflow``: one MLflow run per trial in the experiment named after the experiment. Tracking
  URI: ``MLFLOW_TRACKING_URI`` when set (a server, ``file:PATH`` with MLflow's file-store
  opt-in set for it, or a database such as ``sqlite:///mlflow.db``, which needs SQLAlchemy), else a file store in the run folder (``RUN/mlruns``; read it with
  ``MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri RUN/mlruns``). Each is checked
  before Ray starts (``check_targets``).
- ``wandb``: one W&B run per trial; project ``WANDB_PROJECT`` (default ``raylab``), grouped
  by run name. ``WANDB_MODE=offline`` logs to local files (in ``WANDB_DIR``) for a later ``wandb sync``.
- ``tensorboard``: raylab's TensorBoard events in each trial folder, stepped by the counter,
  with the hparams plugin's table, in place of the events Tune writes by default (when
  tensorboardX is installed; stepped by ``training_iteration``): ``tensorboard --logdir RUN``.
"""

from __future__ import annotations

import os

from raylab.errors import UserError
from raylab.experiment import Experiment
from raylab.files import is_uri
from raylab.launch.checks import probe_local, within
from raylab.run_folder import RunFolder

LOGGERS = ("mlflow", "wandb", "tensorboard")


def check(names: list[str]) -> list[str]:
    """The requested logger names, each known and its package importable; else a UserError."""
    import importlib.util

    packages = {"mlflow": "mlflow", "wandb": "wandb", "tensorboard": "tensorboardX"}
    for name in names:
        if name not in LOGGERS:
            raise UserError(f"--logger {name}: expected one of {', '.join(LOGGERS)}")
        if importlib.util.find_spec(packages[name]) is None:
            raise UserError(
                f"--logger {name}: the '{packages[name]}' package is not installed (pip install {packages[name]})"
            )
    return list(dict.fromkeys(names))


def check_targets(names: list[str], run: RunFolder, timeout_s: float = 10.0) -> None:
    """Before Ray starts: each logger's destination can be used; else one ``UserError`` line.

    MLflow: with no ``MLFLOW_TRACKING_URI`` the store goes into the run folder, which needs a
    local ``--storage``; a ``file:`` store gets MLflow's file-store opt-in and must be a
    writable folder; a database store (``sqlite:``, ``postgresql:``...) needs SQLAlchemy; any
    other URI (an MLflow server) must answer a search for experiments within ``timeout_s``.
    W&B: online mode needs an API key (``wandb login``); offline mode a writable ``WANDB_DIR``.
    """
    if "mlflow" in names:
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        where = f"--logger mlflow: MLFLOW_TRACKING_URI={uri}"
        if not uri:
            mlflow_file_store(run.location)
        elif uri.startswith("file:") or not is_uri(uri):
            allow_file_store(uri)
            probe_local(_file_store_path(uri))
        elif uri.split(":", 1)[0].split("+", 1)[0] in DATABASE_SCHEMES:
            import importlib.util

            missing = [p for p in ("sqlalchemy", "alembic") if importlib.util.find_spec(p) is None]
            if missing:
                raise UserError(
                    f"{where}: MLflow's database stores need {' and '.join(missing)} "
                    "(pip install 'raylab[loggers]', or sqlalchemy alembic); or use a "
                    "file:PATH store or an MLflow server"
                )
            if uri.startswith("sqlite:///"):
                probe_local(str(_file_store_path(uri[len("sqlite:///") :]).parent))
        else:
            _ask_mlflow_server(uri, where, timeout_s)
    if "wandb" in names:
        mode = os.environ.get("WANDB_MODE", "online").lower()
        if mode in ("offline", "dryrun"):
            probe_local(os.environ.get("WANDB_DIR") or ".")
        elif mode != "disabled" and not _wandb_api_key():
            raise UserError(
                "--logger wandb: no W&B API key (set WANDB_API_KEY or run `wandb login`; "
                "WANDB_MODE=offline logs to local files for a later `wandb sync`)"
            )


DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


def allow_file_store(uri: str) -> None:
    """MLflow 3 keeps its file store behind an opt-in (it recommends a database or a server);
    raylab opts in for a ``file:`` tracking URI, the user's or its own."""
    if uri.startswith("file:") or not is_uri(uri):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


def _file_store_path(uri: str):
    from pathlib import Path
    from urllib.parse import unquote, urlsplit

    path = unquote(urlsplit(uri).path) if uri.startswith("file:") else uri
    return Path(path).expanduser().absolute()


def _ask_mlflow_server(uri: str, where: str, timeout_s: float) -> None:
    """One experiments search against the tracking server, without MLflow's minutes of retries.

    The clock starts after MLflow's client is imported: a cold ``import mlflow`` takes many
    seconds on a busy machine, and is no sign of the server's health."""
    from mlflow.tracking import MlflowClient

    def ask() -> None:
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)

    saved = {key: os.environ.get(key) for key in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ.update(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT=f"{timeout_s:g}")
    try:
        within(timeout_s, where, ask)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _wandb_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc

    try:
        return bool(netrc.netrc().authenticators("api.wandb.ai"))
    except (OSError, netrc.NetrcParseError):
        return False


def callbacks(names: list[str], experiment: Experiment, run: RunFolder) -> list:
    """Tune callbacks for ``names`` (already checked), logging the sweep of ``experiment`` in the
    run folder ``run`` (``raylab.launch.trackers.callbacks``)."""
    from raylab.launch.trackers import callbacks as tracker_callbacks

    out = []
    run_name = run.name  # a URI's ?query is not part of it
    for name in names:
        if name == "mlflow":
            uri = os.environ.get("MLFLOW_TRACKING_URI") or mlflow_file_store(run.location)
            allow_file_store(uri)
            out.append(
                tracker_callbacks.MLflowTracker(uri, experiment.name, experiment, run, tags={"raylab.run": run_name})
            )
        elif name == "wandb":
            # Passed on explicitly so that a resumed sweep (Tune restores the callbacks it
            # pickled) logs where it started.
            init = {
                key.lower(): os.environ[f"WANDB_{key}"] for key in ("MODE", "DIR") if os.environ.get(f"WANDB_{key}")
            }
            out.append(
                tracker_callbacks.WandbTracker(
                    os.environ.get("WANDB_PROJECT", "raylab"), run_name, experiment, run, **init
                )
            )
        else:
            out.append(tracker_callbacks.TensorBoardTracker(experiment, run))
    return out


def mlflow_file_store(run_path: str) -> str:
    """The default MLflow tracking URI: a file store in the run folder (local runs only)."""
    if is_uri(run_path):
        raise UserError("--logger mlflow with a cloud --storage needs MLFLOW_TRACKING_URI (an MLflow server)")
    return f"file://{run_path.rstrip('/')}/mlruns"
