"""The small file helpers that checkpoints, datasets and caches share: a file written atomically
(``write_atomic``), a file's SHA-256 (``sha256_file``), and how a path a user gives is resolved
(``user_path``)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

LAUNCH_DIR_ENV = "RAYLAB_LAUNCH_DIR"
"""The folder the sweep was started from, set in each trial's process by raylab."""


def user_location(location: str) -> str:
    """A storage URI (``s3://...``) as given, or a local path resolved as ``user_path`` does."""
    from raylab.run_folder import is_uri

    return location if is_uri(location) else str(user_path(location))


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


def sha256_file(path: str | os.PathLike) -> str:
    """The SHA-256 hex digest of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never a part.

    The bytes go to a temporary file in the same folder (unique, so concurrent writers do not
    collide), are flushed to disk, and the file is renamed over ``path``.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
