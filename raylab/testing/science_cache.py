"""Per-seed results of a long science test, kept on disk so a run cut short resumes.

A science test that spends minutes per seed computes each seed through ``per_seed``: with
``RAYLAB_SCIENCE_CACHE`` set to a folder, a seed's result is written there as it finishes and
read back on the next run instead of being recomputed. The key is the seed, the test's settings
and the source of the packages that compute the result, so an edit to the workload's code or to
the settings recomputes; without the variable nothing is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

SCIENCE_CACHE_ENV = "RAYLAB_SCIENCE_CACHE"


def source_digest(packages: Iterable[str | os.PathLike]) -> str:
    """SHA-256 over every ``.py`` file under the given folders (path and bytes, sorted)."""
    h = hashlib.sha256()
    for folder in packages:
        for path in sorted(Path(folder).rglob("*.py")):
            h.update(str(path.relative_to(folder)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON numbers and lists (``tolist``)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not kept by the science cache (JSON)")


def per_seed(
    name: str, seed: int, settings: Any, sources: Iterable[str | os.PathLike], compute: Callable[[], Any]
) -> Any:
    """``compute()``'s result for ``seed``, from ``$RAYLAB_SCIENCE_CACHE/<name>/`` when a run with
    the same seed, ``settings`` (their ``repr``) and source (``source_digest(sources)``) wrote it.
    Results are kept as JSON (numbers, strings, lists and string-keyed dicts; numpy values as
    numbers and lists), and a fresh result is returned as it reads back, so a first run and a
    resumed one see the same types."""
    folder = os.environ.get(SCIENCE_CACHE_ENV, "").strip()
    if not folder:
        return compute()
    key = hashlib.sha256(repr((seed, settings, source_digest(sources))).encode()).hexdigest()[:16]
    path = Path(folder) / name / f"seed{seed}-{key}.json"
    if path.exists():
        print(f"{name}: seed {seed} read back from {path}")
        return json.loads(path.read_text())
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=_plain))
    tmp.replace(path)
    return json.loads(path.read_text())
