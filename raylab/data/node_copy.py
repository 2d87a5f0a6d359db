"""A node's copy of files staged on a URI (the run's storage), for loaders that read local files.

``python -m raylab.data.stage`` puts a dataset's archive on a URI once; a trial whose
``data_dir`` is that URI reads it through ``node_copy``: the files are copied once per node into
``$RAYLAB_DATA_CACHE`` (default ``~/.cache/raylab/data``), one folder per URI, and copied again
only when the staged file's size changes. The loader checks each copy's checksum as it reads it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from raylab.errors import UserError
from raylab.files import write_atomic
from raylab.run_folder import filesystem

CACHE_ENV = "RAYLAB_DATA_CACHE"
"""Folder under which nodes keep their copies of files staged on a URI."""


def node_copy(data_dir: str, members: list[str]) -> Path:
    """The node-local folder holding copies of ``members`` (file names) of the URI ``data_dir``;
    a member missing there is missing here too."""
    try:
        return _copy(data_dir, members)
    except OSError as err:  # an unreachable store or bucket: one line naming it, not a traceback
        raise UserError(f"data_dir {data_dir}: cannot read it ({' '.join(str(err).split())})") from None


def _copy(data_dir: str, members: list[str]) -> Path:
    cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "raylab" / "data")
    local = cache / hashlib.sha256(data_dir.encode()).hexdigest()[:16]
    fs, folder = filesystem(data_dir)
    local.mkdir(parents=True, exist_ok=True)
    for member in members:
        remote = f"{folder.rstrip('/')}/{member}"
        info = fs.get_file_info(remote)
        if info.type.name != "File":
            (local / member).unlink(missing_ok=True)
            continue
        if (local / member).is_file() and (local / member).stat().st_size == info.size:
            continue
        with fs.open_input_stream(remote, compression=None) as stream:
            write_atomic(local / member, stream.read())  # trials on one node may copy at once
    return local
