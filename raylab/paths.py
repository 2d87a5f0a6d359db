"""Paths that users give in configs (data folders, stores, checkpoints)."""

from __future__ import annotations

import os
from pathlib import Path


def user_path(path: str | os.PathLike) -> Path:
    """``path`` with ``~`` expanded; a relative path is taken from where the command ran.

    Ray Tune runs each trial in a working folder of its own and records the folder the sweep
    was launched from in ``TUNE_ORIG_WORKING_DIR``: relative paths resolve against that, and
    against the current folder outside Tune.
    """
    path = Path(path).expanduser()
    if path.is_absolute():
        return path
    return Path(os.environ.get("TUNE_ORIG_WORKING_DIR", os.getcwd())) / path
