"""Checkpoints: one state dict per checkpoint directory, written atomically, loaded safely.

A checkpoint directory holds ``state.pt`` (``torch.save`` of one dict: model, optimizer, RNG
states, step, config...) and ``meta.json`` (the SHA-256 and size of ``state.pt``). Both are
written to temporary names, flushed to disk and renamed, ``meta.json`` last: a directory whose
``meta.json`` is missing or does not match its ``state.pt`` is incomplete or corrupted, and
``load_latest`` skips it with a warning naming it. Loading uses ``torch.load(...,
weights_only=True)``, which never runs code from the file.
"""

from __future__ import annotations

import json
import os
import random
import re
import warnings
from pathlib import Path
from typing import Any

from raylab.run_folder import sha256_file, write_atomic

STATE_FILE = "state.pt"
META_FILE = "meta.json"


class CorruptCheckpoint(Exception):
    """A checkpoint directory that is incomplete, truncated or fails its checksum."""


def save(directory: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` into ``directory`` (created if needed) atomically; return the directory."""
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{STATE_FILE}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    meta = {"sha256": sha256_file(tmp), "bytes": tmp.stat().st_size}
    os.replace(tmp, directory / STATE_FILE)
    write_atomic(directory / META_FILE, json.dumps(meta).encode())
    _fsync_dir(directory)
    return directory


def load(directory: str | os.PathLike) -> dict[str, Any]:
    """Load the state of one checkpoint directory; ``CorruptCheckpoint`` if it does not verify."""
    import torch

    directory = Path(directory)
    state_path, meta_path = directory / STATE_FILE, directory / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as err:
        raise CorruptCheckpoint(f"{directory}: missing or unreadable {META_FILE} ({err})") from None
    if not state_path.exists() or state_path.stat().st_size != meta.get("bytes"):
        raise CorruptCheckpoint(f"{directory}: {STATE_FILE} is missing or truncated")
    if sha256_file(state_path) != meta.get("sha256"):
        raise CorruptCheckpoint(f"{directory}: {STATE_FILE} fails its checksum")
    try:
        return torch.load(state_path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means a bad file
        raise CorruptCheckpoint(f"{directory}: cannot load {STATE_FILE}: {err}") from None


def load_latest(candidates: list[Path]) -> tuple[dict[str, Any], Path] | None:
    """Load the first good checkpoint of ``candidates`` (newest first), warning about bad ones."""
    for directory in candidates:
        try:
            return load(directory), directory
        except CorruptCheckpoint as err:
            warnings.warn(f"skipping corrupted checkpoint {err}; trying the previous one", stacklevel=2)
    return None


def order_key(name: str) -> list:
    """Sort key of a checkpoint folder name: digit runs compare as numbers.

    Tune names checkpoints ``checkpoint_000012``, Ray Train v2 ``checkpoint_2026-12-01_07-41-08
    .720567``; both sort oldest to newest under this key.
    """
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]


def is_checkpoint_name(name: str) -> bool:
    """A folder Ray or raylab wrote a checkpoint into (not a download or upload in progress)."""
    return name.startswith("checkpoint_") and "tmp" not in name


def siblings_newest_first(directory: Path) -> list[Path]:
    """``directory`` followed by the older checkpoint folders beside it, newest first."""
    return [Path(p) for p in sibling_paths_newest_first(str(directory))]


def sibling_paths_newest_first(path: str, filesystem: Any = None) -> list[str]:
    """``path`` then the older checkpoint folders beside it on ``filesystem`` (local or cloud).

    Any naming Ray uses is accepted (see ``order_key``); a folder whose name is not a
    checkpoint's (a temporary download, ``checkpoint_tmp_*``) has no siblings.
    """
    import pyarrow.fs

    filesystem = filesystem or pyarrow.fs.LocalFileSystem()
    path = path.rstrip("/")
    parent, _, own = path.rpartition("/")
    if not is_checkpoint_name(own) or not parent:
        return [path]
    try:
        listing = filesystem.get_file_info(pyarrow.fs.FileSelector(parent))
    except (OSError, FileNotFoundError):
        return [path]
    older = [
        info.base_name for info in listing
        if info.type == pyarrow.fs.FileType.Directory and is_checkpoint_name(info.base_name)
        and order_key(info.base_name) < order_key(own)
    ]
    return [path] + [f"{parent}/{name}" for name in sorted(older, key=order_key, reverse=True)]


def load_newest_good(path: str, filesystem: Any = None) -> tuple[dict[str, Any], str] | None:
    """Load the checkpoint at ``path`` or, if it does not verify, the newest good older one.

    ``filesystem`` is a ``pyarrow.fs`` filesystem (a Ray ``Checkpoint``'s ``filesystem``); cloud
    checkpoints are downloaded one at a time into a temporary folder. Bad ones are named in a
    warning.
    """
    import shutil
    import tempfile

    import pyarrow.fs

    filesystem = filesystem or pyarrow.fs.LocalFileSystem()
    local = isinstance(filesystem, pyarrow.fs.LocalFileSystem)
    for candidate in sibling_paths_newest_first(path, filesystem):
        tmp = None
        try:
            if local:
                directory = Path(candidate)
            else:
                tmp = Path(tempfile.mkdtemp(prefix="raylab-restore-"))
                pyarrow.fs.copy_files(candidate, str(tmp), source_filesystem=filesystem,
                                      destination_filesystem=pyarrow.fs.LocalFileSystem())
                directory = tmp
            state = load(directory)
            return state, candidate
        except (CorruptCheckpoint, OSError) as err:
            reason = str(err).replace(str(tmp), candidate) if tmp else str(err)
            if candidate not in reason:
                reason = f"{candidate}: {reason}"
            warnings.warn(f"skipping corrupted checkpoint {reason}; trying the previous one",
                          stacklevel=2)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
    return None


def rng_state() -> dict[str, Any]:
    """The global RNG states (Python, NumPy, torch CPU and CUDA) as checkpointable values."""
    import numpy as np
    import torch

    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` captured."""
    import numpy as np
    import torch

    version, keys, *rest = state["numpy"]
    random.setstate(_as_tuples(state["python"]))
    np.random.set_state((version, keys.numpy(), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
