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

from raylab.files import sha256_file, write_atomic

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


def siblings_newest_first(directory: Path) -> list[Path]:
    """``directory`` followed by the older ``checkpoint_NNNNNN`` folders beside it."""
    pattern = re.compile(r"checkpoint_(\d+)$")
    match = pattern.search(directory.name)
    if not match or not directory.parent.is_dir():
        return [directory]
    own = int(match.group(1))
    older = sorted(
        (
            (int(m.group(1)), p)
            for p in directory.parent.iterdir()
            if (m := pattern.search(p.name)) and int(m.group(1)) < own and p.is_dir()
        ),
        reverse=True,
    )
    return [directory] + [p for _, p in older]


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
