"""The embedding store: per-heavy-atom teacher embeddings on disk, sharded, float16, resumable.

Layout of a store directory::

    meta.json                    {"format": "raylab-atom-embeddings-v1", "dim": D,
                                  "dtype": "float16", "teacher": ..., "settings": {...}}
    shard_000000.npy             float16 [atoms in the shard, D], molecules back to back
    shard_000000.index.json      {"keys": [...], "offsets": [...], "counts": [...],
                                  "failed": {key: reason}}
    ...

A molecule's key is its canonical SMILES; its rows are its heavy atoms in the atom order of
``Chem.MolFromSmiles(key)``. A shard exists once its index file exists: the ``.npy`` is written
first, then the index, each to a temporary name and renamed, so a writer killed at any point
leaves only complete shards. A writer reopened on the same directory skips the keys already
stored (or recorded as failed) and continues with the next shard number: extraction resumes.

Only numpy is imported here: the store is written from the boltz environment and read from the
main one.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from raylab.errors import UserError
from raylab.files import write_atomic

FORMAT = "raylab-atom-embeddings-v1"
META_FILE = "meta.json"
FLOAT16_MAX = float(np.finfo(np.float16).max)


def _shard_name(number: int) -> str:
    return f"shard_{number:06d}"


def _index_files(root: Path) -> list[Path]:
    return sorted(root.glob("shard_*.index.json"))


class EmbeddingStore:
    """Read access to a store: ``key in store``, ``store[key]`` (float16 [atoms, dim])."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser()
        meta_path = self.root / META_FILE
        if not meta_path.is_file():
            raise UserError(f"embedding store {self.root}: no {META_FILE} (not a store, or empty)")
        self.meta: dict[str, Any] = json.loads(meta_path.read_text())
        if self.meta.get("format") != FORMAT:
            raise UserError(f"embedding store {self.root}: format {self.meta.get('format')!r}, expected {FORMAT!r}")
        self.dim = int(self.meta["dim"])
        self._where: dict[str, tuple[int, int, int]] = {}
        self.failed: dict[str, str] = {}
        self._shards: list[Path] = []
        for number, index_path in enumerate(_index_files(self.root)):
            index = json.loads(index_path.read_text())
            self._shards.append(index_path.with_name(index_path.name.replace(".index.json", ".npy")))
            for key, offset, count in zip(index["keys"], index["offsets"], index["counts"]):
                self._where[key] = (number, offset, count)
            self.failed.update(index.get("failed", {}))
        self._arrays: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: str) -> bool:
        return key in self._where

    def keys(self) -> list[str]:
        return list(self._where)

    def total_rows(self) -> int:
        """Atoms stored over all molecules."""
        return sum(count for _, _, count in self._where.values())

    def _array(self, number: int) -> np.ndarray:
        if number not in self._arrays:
            self._arrays[number] = np.load(self._shards[number], mmap_mode="r")
        return self._arrays[number]

    def __getitem__(self, key: str) -> np.ndarray:
        number, offset, count = self._where[key]
        return np.asarray(self._array(number)[offset : offset + count])

    def get_many(self, keys: Iterable[str]) -> list[np.ndarray]:
        """The embeddings of ``keys`` (a ``KeyError`` names the first missing one)."""
        return [self[key] for key in keys]

    def missing(self, keys: Iterable[str]) -> list[str]:
        """The keys of ``keys`` that the store has no embedding for."""
        return [k for k in keys if k not in self._where]


class StoreWriter:
    """Append molecules to a store (created if new, continued if it exists).

    ``meta`` (teacher name and settings) must match an existing store's, so that one store never
    mixes two teachers or layers. Use as a context manager, or call ``close()``.
    """

    def __init__(self, root: str | os.PathLike, dim: int, meta: dict[str, Any], shard_size: int = 1000):
        if dim < 1 or shard_size < 1:
            raise ValueError(f"dim and shard_size must be >= 1, got {dim}, {shard_size}")
        self.root = Path(root).expanduser()
        self.root.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self.shard_size = shard_size
        wanted = {"format": FORMAT, "dim": dim, "dtype": "float16", **meta}
        meta_path = self.root / META_FILE
        if meta_path.is_file():
            have = json.loads(meta_path.read_text())
            if have != json.loads(json.dumps(wanted)):
                diff = sorted(k for k in set(have) | set(wanted) if have.get(k) != wanted.get(k))
                raise UserError(
                    f"embedding store {self.root} was written with other settings "
                    f"({', '.join(f'{k}: {have.get(k)!r} here, {wanted.get(k)!r} now' for k in diff)}); "
                    f"use another output directory"
                )
        else:
            write_atomic(meta_path, json.dumps(wanted, indent=1, sort_keys=True).encode())
        existing = EmbeddingStore(self.root)
        self.done: set[str] = set(existing.keys()) | set(existing.failed)
        self._next_shard = len(_index_files(self.root))
        self._keys: list[str] = []
        self._arrays: list[np.ndarray] = []
        self._failed: dict[str, str] = {}
        self.clipped = 0

    def __contains__(self, key: str) -> bool:
        return key in self.done

    def add(self, key: str, embedding: np.ndarray) -> None:
        """Queue one molecule's [atoms, dim] embedding; a shard is written every ``shard_size``."""
        embedding = np.asarray(embedding, dtype=np.float32)
        if embedding.ndim != 2 or embedding.shape[1] != self.dim:
            raise ValueError(f"{key}: expected an [atoms, {self.dim}] array, got {embedding.shape}")
        if not np.isfinite(embedding).all():
            raise ValueError(f"{key}: embedding has non-finite values")
        big = np.abs(embedding) > FLOAT16_MAX
        if big.any():
            self.clipped += int(big.sum())
            embedding = np.clip(embedding, -FLOAT16_MAX, FLOAT16_MAX)
        if key in self.done:
            return
        self.done.add(key)
        self._keys.append(key)
        self._arrays.append(embedding.astype(np.float16))
        if len(self._keys) + len(self._failed) >= self.shard_size:
            self.flush()

    def fail(self, key: str, reason: str) -> None:
        """Record that the teacher could not embed ``key`` (a resumed run does not retry it)."""
        if key in self.done:
            return
        self.done.add(key)
        self._failed[key] = reason
        if len(self._keys) + len(self._failed) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        """Write the queued molecules as one shard (nothing if the queue is empty)."""
        if not self._keys and not self._failed:
            return
        name = _shard_name(self._next_shard)
        counts = [a.shape[0] for a in self._arrays]
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist() if counts else []
        data = np.concatenate(self._arrays) if self._arrays else np.zeros((0, self.dim), np.float16)
        tmp = self.root / f".{name}.npy.tmp"
        with open(tmp, "wb") as f:
            np.save(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.root / f"{name}.npy")
        index = {"keys": self._keys, "offsets": offsets, "counts": counts, "failed": self._failed}
        write_atomic(self.root / f"{name}.index.json", json.dumps(index).encode())
        self._next_shard += 1
        self._keys, self._arrays, self._failed = [], [], {}

    def close(self) -> None:
        self.flush()
        if self.clipped:
            warnings.warn(
                f"embedding store {self.root}: {self.clipped} values beyond the float16 "
                f"range were clipped to +-{FLOAT16_MAX:g}",
                stacklevel=2,
            )

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
