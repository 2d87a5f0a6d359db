"""``--logger mlflow|wandb|tensorboard``: Ray Tune's own logger callbacks, set up for a run.

- ``mlflow``: ``MLflowLoggerCallback``; one MLflow run per trial in the experiment named after
  the experiment. Tracking URI: ``MLFLOW_TRACKING_URI`` when set, else a file store in the run
  folder (``RUN/mlruns``; read it with ``MLFLOW_ALLOW_FILE_STORE=true mlflow ui
  --backend-store-uri RUN/mlruns``).
- ``wandb``: ``WandbLoggerCallback``; project ``WANDB_PROJECT`` (default ``raylab``), grouped
  by run name. ``WANDB_MODE=offline`` logs to local files (in ``WANDB_DIR``) for a later ``wandb sync``.
- ``tensorboard``: ``TBXLoggerCallback`` (Tune adds it by default when tensorboardX is
  installed; naming it makes it explicit): ``tensorboard --logdir RUN``.
"""

from __future__ import annotations

import os

from raylab import storage
from raylab.errors import UserError

LOGGERS = ("mlflow", "wandb", "tensorboard")


def check(names: list[str]) -> list[str]:
    """The requested logger names, each known and its package importable; else a UserError."""
    import importlib.util

    packages = {"mlflow": "mlflow", "wandb": "wandb", "tensorboard": "tensorboardX"}
    for name in names:
        if name not in LOGGERS:
            raise UserError(f"--logger {name}: expected one of {', '.join(LOGGERS)}")
        if importlib.util.find_spec(packages[name]) is None:
            raise UserError(f"--logger {name}: the '{packages[name]}' package is not installed "
                            f"(pip install {packages[name]})")
    return list(dict.fromkeys(names))


def callbacks(names: list[str], experiment_name: str, run_path: str) -> list:
    """Tune callbacks for ``names`` (already checked), logging to the run at ``run_path``."""
    out = []
    run_name = storage.name_of(run_path)  # a URI's ?query is not part of it
    for name in names:
        if name == "mlflow":
            from ray.air.integrations.mlflow import MLflowLoggerCallback

            uri = os.environ.get("MLFLOW_TRACKING_URI")
            if not uri:
                uri = mlflow_file_store(run_path)
                # MLflow 3 keeps its file store only behind this opt-in (a server or a database
                # backend is what it recommends; MLFLOW_TRACKING_URI selects one).
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            out.append(MLflowLoggerCallback(
                tracking_uri=uri, experiment_name=experiment_name,
                tags={"raylab.run": run_name}, save_artifact=False,
            ))
        elif name == "wandb":
            from ray.air.integrations.wandb import WandbLoggerCallback

            # W&B logs from an actor that does not see this process's environment: pass the
            # mode (offline) and folder on to wandb.init explicitly.
            init = {key.lower(): os.environ[f"WANDB_{key}"] for key in ("MODE", "DIR")
                    if os.environ.get(f"WANDB_{key}")}
            out.append(WandbLoggerCallback(
                project=os.environ.get("WANDB_PROJECT", "raylab"), group=run_name,
                log_config=True, **init,
            ))
        else:
            from ray.tune.logger import TBXLoggerCallback

            out.append(TBXLoggerCallback())
    return out


def mlflow_file_store(run_path: str) -> str:
    """The default MLflow tracking URI: a file store in the run folder (local runs only)."""
    if storage.is_uri(run_path):
        raise UserError("--logger mlflow with a cloud --storage needs MLFLOW_TRACKING_URI "
                        "(an MLflow server)")
    return f"file://{run_path.rstrip('/')}/mlruns"
