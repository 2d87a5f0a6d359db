"""Checkpoints: one state dict per checkpoint directory, written atomically, loaded safely.

A checkpoint directory holds ``state.pt`` (``torch.save`` of one dict: model, optimizer, RNG
states, step, config...) and ``meta.json`` (the SHA-256 and size of ``state.pt``). Both are
written to temporary names, flushed to disk and renamed, ``meta.json`` last: a directory whose
``meta.json`` is missing or does not match its ``state.pt`` is incomplete or corrupted, and
``load_latest`` skips it with a warning naming it. Loading uses ``torch.load(...,
weights_only=True)``, which never runs code from the file. What a loop puts into its checkpoints
is declared once, as the fields of a ``LoopState`` dataclass (at the end of this module).

A state larger than ``PART_BYTES`` (1 GiB) is written in parts: ``state.pt`` holds its first
``PART_BYTES`` and ``state.pt.part1``, ``state.pt.part2``... the rest, and ``meta.json`` lists
each part's size. No file of a checkpoint is then over 1 GiB, which keeps every file under S3's
5 GB limit on a single CopyObject request: Tune's copy of a Train checkpoint into the trial
folder is one such request per file (pyarrow's S3 copy has no multipart form), so a single
7 GB ``state.pt`` (dqn_softlinf's replay at 1M transitions) would fail there on AWS.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import warnings
from pathlib import Path
from typing import Any

from raylab.files import write_atomic
from raylab.run_folder import checkpoint_order, is_checkpoint_name

STATE_FILE = "state.pt"
META_FILE = "meta.json"
PART_BYTES = 1 << 30
"""The most bytes in one file of a checkpoint (S3 refuses CopyObject over 5 GB)."""


class CorruptCheckpoint(Exception):
    """A checkpoint directory that is incomplete, truncated or fails its checksum."""


def save(directory: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` into ``directory`` (created if needed) atomically; return the directory.

    The bytes go to ``state.pt`` and, past ``PART_BYTES``, to ``state.pt.part1``, ...: see the
    module docstring. Their SHA-256 is computed as they are written."""
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with _PartWriter(directory, PART_BYTES) as out:
        torch.save(state, out)
    names = [part_name(i) for i in range(len(out.sizes))]
    for i, name in enumerate(names):
        os.replace(out.tmp(i), directory / name)
    for stale in directory.glob(f"{STATE_FILE}.part*"):  # parts of an earlier, larger state
        if stale.name not in names:
            stale.unlink()
    meta = {"sha256": out.sha256.hexdigest(), "bytes": sum(out.sizes)}
    if len(names) > 1:
        meta["parts"] = [{"name": n, "bytes": b} for n, b in zip(names, out.sizes)]
    write_atomic(directory / META_FILE, json.dumps(meta).encode())
    _fsync_dir(directory)
    return directory


def part_name(index: int) -> str:
    """``state.pt`` for the first part, ``state.pt.part<index>`` for the others."""
    return STATE_FILE if index == 0 else f"{STATE_FILE}.part{index}"


class _PartWriter(io.RawIOBase):
    """A write-only stream into ``.state.pt*.tmp`` files of at most ``limit`` bytes each, each
    flushed to disk when full; it hashes what it writes."""

    def __init__(self, directory: Path, limit: int):
        self.directory, self.limit = directory, limit
        self.sha256 = hashlib.sha256()
        self.sizes: list[int] = []
        self._file = None

    def tmp(self, index: int) -> Path:
        return self.directory / f".{part_name(index)}.tmp"

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        self.sha256.update(view)
        while len(view):
            if self._file is None or self.sizes[-1] == self.limit:
                self._next()
            room = self.limit - self.sizes[-1]
            self._file.write(view[:room])
            self.sizes[-1] += min(room, len(view))
            view = view[room:]
        return n

    def _next(self) -> None:
        self._close_part()
        self._file = open(self.tmp(len(self.sizes)), "wb")
        self.sizes.append(0)

    def _close_part(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def close(self) -> None:
        if not self.closed:
            if self._file is None:
                self._next()  # an empty stream is one empty part
            self._close_part()
        super().close()


class _PartReader(io.RawIOBase):
    """The parts of one state, read and seeked as one file."""

    def __init__(self, paths: list[Path]):
        self._files = [open(p, "rb") for p in paths]
        sizes = [os.fstat(f.fileno()).st_size for f in self._files]
        self._starts = [sum(sizes[:i]) for i in range(len(sizes))]
        self._size, self._pos = sum(sizes), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        view, done = memoryview(buffer).cast("B"), 0
        while done < len(view) and self._pos < self._size:
            i = max(k for k, start in enumerate(self._starts) if start <= self._pos)
            f = self._files[i]
            f.seek(self._pos - self._starts[i])
            got = f.readinto(view[done:])
            if not got:
                break
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


def _parts(directory: Path, meta: dict) -> list[tuple[Path, int]]:
    """(path, bytes) of each part the metadata names; a single-file state is one part."""
    listed = meta.get("parts") or [{"name": STATE_FILE, "bytes": meta.get("bytes")}]
    return [(directory / p["name"], p["bytes"]) for p in listed]


def load(directory: str | os.PathLike) -> dict[str, Any]:
    """Load the state of one checkpoint directory; ``CorruptCheckpoint`` if it does not verify."""
    import torch

    directory = Path(directory)
    meta_path = directory / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as err:
        raise CorruptCheckpoint(f"{directory}: missing or unreadable {META_FILE} ({err})") from None
    parts = _parts(directory, meta)
    for path, size in parts:
        if not path.exists() or path.stat().st_size != size:
            raise CorruptCheckpoint(f"{directory}: {path.name} is missing or truncated")
    digest = hashlib.sha256()
    with io.BufferedReader(_PartReader([p for p, _ in parts]), 1 << 20) as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != meta.get("sha256"):
        raise CorruptCheckpoint(f"{directory}: {STATE_FILE} fails its checksum")
    try:
        with io.BufferedReader(_PartReader([p for p, _ in parts]), 1 << 20) as f:
            return torch.load(f, map_location="cpu", weights_only=True)
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
    """``directory`` followed by the older checkpoint folders beside it, newest first."""
    return [Path(p) for p in sibling_paths_newest_first(str(directory))]


def sibling_paths_newest_first(path: str, filesystem: Any = None) -> list[str]:
    """``path`` then the older checkpoint folders beside it on ``filesystem`` (local or cloud).

    Any naming Ray uses is accepted (``raylab.run_folder.checkpoint_order``); a folder whose
    name is not a checkpoint's (a temporary download) has no siblings.
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
        info.base_name
        for info in listing
        if info.type == pyarrow.fs.FileType.Directory
        and is_checkpoint_name(info.base_name)
        and checkpoint_order(info.base_name) < checkpoint_order(own)
    ]
    return [path] + [f"{parent}/{name}" for name in sorted(older, key=checkpoint_order, reverse=True)]


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
                pyarrow.fs.copy_files(
                    candidate,
                    str(tmp),
                    source_filesystem=filesystem,
                    destination_filesystem=pyarrow.fs.LocalFileSystem(),
                )
                directory = tmp
            state = load(directory)
            return state, candidate
        except (CorruptCheckpoint, OSError) as err:
            reason = str(err).replace(str(tmp), candidate) if tmp else str(err)
            if candidate not in reason:
                reason = f"{candidate}: {reason}"
            warnings.warn(f"skipping corrupted checkpoint {reason}; trying the previous one", stacklevel=2)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
    return None


def load_at(location: str) -> tuple[dict[str, Any], str] | None:
    """The state at ``location``, a local path or a storage URI (``s3://...``, read through
    pyarrow as Ray's storage is): a checkpoint folder (it holds ``state.pt``), or a trial folder,
    whose newest good checkpoint is read (``load_newest_good``). Returns ``(state, where)``, or
    None when there is no readable checkpoint. For a workload that loads another run's results
    (a victim, a distilled student)."""
    import pyarrow.fs

    from raylab.run_folder import TrialFolder, filesystem

    fs, path = filesystem(location)
    folder = path.rstrip("/")
    if fs.get_file_info(f"{folder}/{STATE_FILE}").type != pyarrow.fs.FileType.File:
        names = TrialFolder.at(location).checkpoints()
        if not names:
            return None
        folder = f"{folder}/{names[-1]}"
    return load_newest_good(folder, fs)


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


# ------------------------------------------------------------------------ a loop's state


class LoopState:
    """Base of a train loop's state dataclass: its fields are the one list of what a checkpoint
    holds and what a resume restores, so a key cannot be saved and forgotten on restore::

        @dataclass
        class State(LoopState):
            model: torch.nn.Module
            optimizer: torch.optim.Optimizer
            rng: GlobalRNG = field(default_factory=GlobalRNG)
            step: int = 0
            config: dict = saved_only()         # in each checkpoint for its readers, not restored

        st = State(model, optimizer, config=config)
        if (saved := session.restore()) is not None:
            st.load_state_dict(saved)
        ...
        session.report(metrics, state=st.state_dict)

    A field whose value has ``state_dict()``/``load_state_dict()`` (a module, an optimizer, a
    scheduler, a replay buffer, ``GlobalRNG``) is saved as its state dict and restored into the
    object in place; a ``torch.Generator`` as its ``get_state()``, a NumPy ``Generator`` as its
    bit generator's state, both restored in place; a NumPy array as a tensor (restored as an
    array); any other value (a counter, a tensor, a dict of floats, None) as it is, its tensors
    moved to the CPU. ``load_state_dict`` raises ``KeyError`` naming every field the checkpoint
    lacks, before it changes anything; ``load_state_dict(saved, device=...)`` moves the tensors of
    the fields declared with ``on_device()`` (a tensor, or a dict, list or tuple of them) to that
    device, so a loop restores them where it keeps them, with no moves of its own::

        top: torch.Tensor | None = on_device()  # restored onto the trial's device
    """

    def state_dict(self) -> dict[str, Any]:
        import dataclasses

        return {f.name: _saved(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def load_state_dict(self, state: dict[str, Any], device: Any = None) -> None:
        import dataclasses

        to_device = {f.name for f in dataclasses.fields(self) if f.metadata.get("on_device")}
        names = [f.name for f in dataclasses.fields(self) if f.metadata.get("restore", True)]
        missing = [name for name in names if name not in state]
        if missing:
            raise KeyError(
                f"{type(self).__name__}: the checkpoint has no {', '.join(map(repr, missing))} "
                f"(it holds {', '.join(map(repr, sorted(state)))})"
            )
        for name in names:
            value = _restored(getattr(self, name), state[name])
            setattr(self, name, _moved(value, device) if device is not None and name in to_device else value)


class GlobalRNG:
    """The process's global RNG states (Python, NumPy, torch) as one field of a ``LoopState``:
    ``rng_state()`` when saved, ``set_rng_state`` when restored."""

    def state_dict(self) -> dict[str, Any]:
        return rng_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_rng_state(state)


def saved_only(default: Any = None) -> Any:
    """A ``LoopState`` field written into every checkpoint for its readers (the trial's config,
    the step a run resumed from) and not restored from it."""
    import dataclasses

    return dataclasses.field(default=default, metadata={"restore": False})


def on_device(default: Any = None, default_factory: Any = None) -> Any:
    """A ``LoopState`` field whose tensors live on the trial's device: saved on the CPU like any
    other, and moved back to the device ``load_state_dict(saved, device=...)`` names."""
    import dataclasses

    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata={"on_device": True})
    return dataclasses.field(default=default, metadata={"on_device": True})


def _saved(value: Any) -> Any:
    import numpy as np
    import torch

    if hasattr(value, "state_dict"):
        return value.state_dict()
    if isinstance(value, torch.Generator):
        return value.get_state()
    if isinstance(value, np.random.Generator):
        return value.bit_generator.state
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    return _on_cpu(value)


def _restored(current: Any, saved: Any) -> Any:
    import numpy as np
    import torch

    if hasattr(current, "load_state_dict"):
        current.load_state_dict(saved)
        return current
    if isinstance(current, torch.Generator):
        current.set_state(saved)
        return current
    if isinstance(current, np.random.Generator):
        current.bit_generator.state = saved
        return current
    if isinstance(current, np.ndarray):
        return saved.numpy()
    return saved


def _on_cpu(value: Any) -> Any:
    return _moved(value, "cpu")


def _moved(value: Any, device: Any) -> Any:
    """``value`` with its tensors (in dicts, lists and tuples too) on ``device``."""
    import torch

    if torch.is_tensor(value):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _moved(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [_moved(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(_moved(v, device) for v in value)
    return value
