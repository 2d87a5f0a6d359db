"""Students distilled inside a sweep, kept in the run's storage: made once, read by every trial.

An ``admet_probe`` trial that probes a student distilled here (``student_teachers``, no
checkpoint given) finds it in its run folder (``raylab.session.run_folder()``: the run under the
sweep's ``--storage``, a local folder or an ``s3://`` URI, which every node reaches) and
distils it only when no trial of the run has published it yet::

    RUN/_students/NAME/published.json    {"copy": COPY, ...}: the one copy every trial probes
    RUN/_students/NAME/COPY/             a whole checkpoint folder (state.pt, meta.json)

Written once, never torn: a writer uploads its checkpoint into a folder of its own (``COPY``,
unique per writer) and only then publishes it with the one-object marker ``published.json``;
the first writer wins, a later one deletes its copy and probes the winner's. A marker, not a
folder written under a temporary name and renamed: a checkpoint is two or more files, and S3
has no rename (pyarrow's ``move`` there is a copy per object), while one object is written
whole or not at all. Readers read through pyarrow's filesystem as Ray's storage is
(``raylab.checkpoint.load_at``).

On a local (or shared, NFS) run folder the marker is created with ``os.link``, which fails
where it exists: strictly the first writer wins. On a URI, pyarrow has no create-if-absent, so
a writer looks, then writes: two writers that both look before either's marker lands (a window
of one request, after a distillation of minutes) both write it; the later stands. Each copy is
whole and each writer probes what the marker names when it reads it back, so at worst the
trial that read back between the two writes probes the other copy of the same setting and seed.

Trials on one node wait for each other on a node-local lock (``student_root/NAME.lock``): one
distils, the others find its copy published. Trials on different nodes that start before any
copy is published each distil (the lock is per node); only one copy is published.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable

from raylab import checkpoint as ckpt
from raylab.run_folder import RunFolder

STUDENTS = "_students"
"""The run folder's subfolder of in-sweep students (``_``: not a trial folder of the run)."""
MARKER = "published.json"
"""Beside a student's copies: which copy is the student."""


def marker_of(name: str) -> str:
    """The marker's path inside the run folder."""
    return f"{STUDENTS}/{name}/{MARKER}"


def published(run: RunFolder, name: str) -> str | None:
    """The location (path or URI) of student ``name``'s published copy in ``run``, or None."""
    text = run.read_text(marker_of(name))
    try:
        copy = json.loads(text)["copy"] if text else None
    except (ValueError, KeyError, TypeError):
        copy = None  # not a marker this module wrote: refuse to guess, distil again below
    return run.join(STUDENTS, name, copy) if isinstance(copy, str) and copy else None


def publish(run: RunFolder, name: str, state: dict[str, Any]) -> str:
    """Upload ``state`` as a copy of student ``name`` and publish it unless another writer's is
    published first; return the location of the published copy (this one or the winner's)."""
    copy = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="raylab-student-") as tmp:
        ckpt.save(tmp, state)
        run.upload(tmp, f"{STUDENTS}/{name}/{copy}")
    text = json.dumps({"copy": copy, "host": socket.gethostname(), "pid": os.getpid()})
    if not run.is_uri:
        _create_once(Path(run.join(marker_of(name))), text)
    elif run.kind(marker_of(name)) != "file":
        run.write_text(marker_of(name), text)
    winner, ours = published(run, name), run.join(STUDENTS, name, copy)
    if winner is None:
        return ours  # a marker this module cannot read: probe this trial's own copy
    if winner != ours:
        run.remove(f"{STUDENTS}/{name}/{copy}")  # another writer's copy is the student
    return winner


def _create_once(path: Path, text: str) -> None:
    """Write ``path`` whole unless it exists (then leave it): a temporary file hard-linked to
    its name, which fails where the name exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def shared_student(run: RunFolder, name: str, make: Callable[[], dict[str, Any]]) -> str:
    """The location of student ``name`` in ``run``: the published copy, else ``make()``'s state
    published (or the copy another writer published meanwhile). The caller holds its node's lock."""
    found = published(run, name)
    if found is not None:
        return found
    return publish(run, name, make())
