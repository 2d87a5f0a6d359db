"""Paths that users give in configs (data folders, stores, checkpoints)."""

from __future__ import annotations

import os
from pathlib import Path


LAUNCH_DIR_ENV = "RAYLAB_LAUNCH_DIR"
"""The folder the sweep was started from, set in each trial's process by raylab."""


def user_path(path: str | os.PathLike) -> Path:
    """``path`` with ``~`` expanded; a relative path is taken from where the command ran.

    Ray Tune runs each trial in a working folder of its own; raylab records the folder the
    sweep was launched from in ``RAYLAB_LAUNCH_DIR`` for the trial: relative paths resolve
    against that, and against the current folder outside a trial.
    """
    path = Path(path).expanduser()
    if path.is_absolute():
        return path
    return Path(os.environ.get(LAUNCH_DIR_ENV) or os.getcwd()) / path
