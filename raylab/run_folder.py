"""Where results live: a run folder (a local path or a URI), the files raylab keeps in it, the
newest run of an experiment, and a trial's status.

A run folder is what ``python -m raylab.tune`` (one folder per Tune trial) or
``python -m raylab.train`` (one ``trial/`` folder) writes under ``--storage``::

    experiment.yaml          the experiment as it ran, with its provenance
    summary.csv              the end-of-sweep table
    _raylab/finished.yaml    every trial reached its end: ``--resume`` has nothing to do
    _raylab/ended/TRIAL_ID   one empty file per trial whose loop returned
    TRIAL/params.json, result.json, error.txt, config.yaml, checkpoint_*/

Local folders and URIs (``s3://``, ``gs://``, ``file://``, a ``?query`` of pyarrow options kept
last) are read and written through one ``RunFolder``; the URI mechanics are ``raylab.storage``'s.
"""

from __future__ import annotations

import os
from pathlib import Path

from raylab import storage, yaml_io
from raylab.errors import UserError

EXPERIMENT_FILE = "experiment.yaml"
RUN_INTERNAL = "_raylab"
FINISHED_FILE = f"{RUN_INTERNAL}/finished.yaml"
"""Written when every trial of a sweep has terminated: ``--resume`` then has nothing to do."""
ENDED_DIR = f"{RUN_INTERNAL}/ended"
"""One empty file per trial whose loop returned (``_raylab/ended/TRIAL_ID``). Tune's saved state
can miss that: when a sweep is killed soon after a trial's function returns, Ray 2.60 may have
saved the trial TERMINATED with a last result that lacks ``done``, and a resume keeps it so."""
TRAIN_RUN = "raylab.train"
"""``provenance.command`` of a ``python -m raylab.train`` run (a sweep's says ``raylab.tune``)."""

LIVE_STATUSES = ("RUNNING", "PENDING", "PAUSED")
"""Tune's words for a trial that has not reached its end yet, in a sweep still running."""


def trial_status(reported: bool, done: bool, error: bool, ended: bool = False,
                 tune_status: str | None = None) -> str:
    """A trial's status, the one definition the end-of-sweep table and the report share.

    ``ERROR`` when it failed (an error, or Tune's state says so); ``TERMINATED`` when its last
    result says ``done`` or its loop returned (``ended``: its marker in ``_raylab/ended``);
    otherwise Tune's word while the sweep is live (``RUNNING``, ``PENDING``, ``PAUSED``), else
    ``STOPPED`` when it reported and ``NO RESULTS`` when it never did. Tune's own ``TERMINATED``
    is not trusted: an interrupted sweep saves its stopped trials so.
    """
    if error or tune_status == "ERROR":
        return "ERROR"
    if done or ended:
        return "TERMINATED"
    if tune_status in LIVE_STATUSES:
        return tune_status
    return "STOPPED" if reported else "NO RESULTS"


class RunFolder:
    """One run folder, local or on cloud storage: its name, its files, its markers."""

    def __init__(self, location: str | os.PathLike):
        self.location = storage.root(str(location))
        """An absolute local path, or the URI as given (its ``?query`` last)."""

    @classmethod
    def under(cls, storage_root: str, name: str) -> RunFolder:
        """The run folder ``name`` under ``--storage`` (a path or a URI)."""
        return cls(storage.join(storage.root(storage_root), name))

    def __repr__(self) -> str:
        return f"RunFolder({self.location!r})"

    def __str__(self) -> str:
        return self.location

    def __eq__(self, other) -> bool:
        return isinstance(other, RunFolder) and other.location == self.location

    def __hash__(self) -> int:
        return hash(self.location)

    @property
    def name(self) -> str:
        """The run's name: the folder's last path element (a URI's ``?query`` is no part of it)."""
        return storage.name_of(self.location)

    @property
    def storage_root(self) -> str:
        """The ``--storage`` root that holds the folder (what Tune's ``storage_path`` is)."""
        return storage.parent(self.location)

    @property
    def is_uri(self) -> bool:
        return storage.is_uri(self.location)

    def join(self, *parts: str) -> str:
        """A path or URI inside the folder (a URI's ``?query`` kept last)."""
        return storage.join(self.location, *parts)

    # -------------------------------------------------------------------- files

    def _fs(self):
        import pyarrow

        try:
            fs, path = storage.filesystem(self.location)
        except (pyarrow.ArrowInvalid, OSError, ValueError) as err:
            raise UserError(f"cannot open {self.location}: {err}") from None
        return fs, path.rstrip("/") or "/"

    def _path(self, relative: str) -> tuple:
        fs, root = self._fs()
        return fs, f"{root}/{relative}".rstrip("/") if relative else root

    def kind(self, relative: str = "") -> str:
        """``dir``, ``file`` or ``missing``: what ``relative`` is in the folder."""
        import pyarrow.fs

        if not self.is_uri:
            target = Path(self.location, relative)
            return "dir" if target.is_dir() else "file" if target.is_file() else "missing"
        fs, path = self._path(relative)
        try:
            info = fs.get_file_info(path)
        except OSError as err:
            raise UserError(f"cannot read {self.join(relative)}: {err}") from None
        return {pyarrow.fs.FileType.Directory: "dir", pyarrow.fs.FileType.File: "file"}.get(info.type, "missing")

    def listdir(self, relative: str = "") -> list[tuple[str, str]]:
        """``(name, kind)`` of the entries directly under ``relative``, by name; none if missing."""
        import pyarrow.fs

        fs, path = self._path(relative)
        try:
            entries = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
        except OSError as err:
            raise UserError(f"cannot read {self.join(relative)}: {err}") from None
        return sorted((e.base_name, "dir" if e.type == pyarrow.fs.FileType.Directory else "file")
                      for e in entries)

    def exists(self) -> bool:
        """Whether the folder already holds anything (a file there counts too)."""
        kind = self.kind()
        return kind == "file" or (kind == "dir" and bool(self.listdir()))

    def read_text(self, relative: str) -> str | None:
        """A file of the folder, or None when it is not there."""
        if not self.is_uri:
            target = Path(self.location, relative)
            return target.read_text(errors="replace") if target.is_file() else None
        if self.kind(relative) != "file":
            return None
        fs, path = self._path(relative)
        with fs.open_input_stream(path) as f:
            return f.read().decode("utf-8", errors="replace")

    def write_text(self, relative: str, text: str) -> str:
        """Write a file into the folder (its folders made first); return its path or URI."""
        if not self.is_uri:
            target = Path(self.location, relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            return str(target)
        fs, path = self._path(relative)
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as f:
            f.write(text.encode())
        return self.join(relative)

    def remove(self, relative: str) -> None:
        """Delete a folder inside this one (or this one, ``""``) if it is there."""
        import pyarrow.fs

        fs, path = self._path(relative)
        if fs.get_file_info(path).type == pyarrow.fs.FileType.Directory:
            fs.delete_dir(path)

    # -------------------------------------------------------------------- what raylab keeps

    def experiment(self) -> dict | None:
        """The saved ``experiment.yaml`` as a mapping; None when missing or not a mapping."""
        text = self.read_text(EXPERIMENT_FILE)
        try:
            saved = yaml_io.loads(text, self.join(EXPERIMENT_FILE)) if text is not None else None
        except UserError:
            return None
        return saved if isinstance(saved, dict) else None

    def mark_ended(self, trial_id: str) -> None:
        """Record that trial ``trial_id``'s loop returned (called in the trial, as it ends)."""
        self.write_text(f"{ENDED_DIR}/{trial_id}", "")

    def ended(self, trial_id: str) -> bool:
        """Whether trial ``trial_id``'s loop returned, in this run or an earlier run of the sweep."""
        return self.read_text(f"{ENDED_DIR}/{trial_id}") is not None

    def ended_trials(self) -> frozenset[str]:
        """The ids of every trial whose loop returned."""
        return frozenset(name for name, kind in self.listdir(ENDED_DIR) if kind == "file")

    @property
    def finished(self) -> bool:
        """Whether every trial of the run terminated (its sweep wrote the finished marker)."""
        return self.read_text(FINISHED_FILE) is not None

    def mark_finished(self, trials: int) -> None:
        self.write_text(FINISHED_FILE, yaml_io.dumps({"trials": trials}))

    def restorable(self) -> bool:
        """Whether Tune can restore the sweep here: its Tuner state (``Tuner.can_restore``) and
        at least one experiment state file, which ``Tuner.restore`` also needs (a sweep that
        stopped before its first trial started has the one and not the other)."""
        from ray import tune

        if not tune.Tuner.can_restore(self.location):
            return False
        return any(name.startswith("experiment_state-") and name.endswith(".json")
                   for name, kind in self.listdir() if kind == "file")


def is_train_run(saved: dict, folder_name: str) -> bool:
    """Whether a saved experiment is a ``python -m raylab.train`` run's (its provenance says
    so; runs older than that record are known by their ``NAME-train-`` folder name)."""
    command = (saved.get("provenance") or {}).get("command") if isinstance(saved.get("provenance"), dict) else None
    if command:
        return command == TRAIN_RUN
    return folder_name.startswith(f"{saved.get('name')}-train")


def newest_run(storage_root: str, experiment: str, *, smoke: bool | None = None,
               train: bool | None = False, keep=None) -> RunFolder | None:
    """The newest run of ``experiment`` under ``storage_root`` (a path or a URI), or None.

    The runs are the folders whose saved ``experiment.yaml`` names ``experiment``; ``smoke``
    (True or False) keeps only smoke or only full runs, ``train`` only ``python -m raylab.train``
    runs (True) or only sweeps (False; None keeps both), and ``keep(run)`` any further choice
    (unfinished, restorable). Newest is the run whose ``experiment.yaml`` changed last: a
    sweep rewrites it as it starts, resumes and ends.
    """
    import pyarrow.fs

    root = RunFolder(storage_root)
    if root.kind() != "dir":
        return None
    fs, base = root._fs()
    candidates = []
    for name, kind in root.listdir():
        if kind != "dir":
            continue
        run = RunFolder(root.join(name))
        saved = run.experiment()
        if saved is None or saved.get("name") != experiment:
            continue
        if smoke is not None and bool(saved.get("smoke")) != smoke:
            continue
        if train is not None and is_train_run(saved, name) != train:
            continue
        if keep is not None and not keep(run):
            continue
        info = fs.get_file_info(f"{base}/{name}/{EXPERIMENT_FILE}")
        changed = info.mtime_ns if info.type == pyarrow.fs.FileType.File else 0
        candidates.append((changed or 0, name, run))
    return max(candidates, key=lambda c: c[:2])[2] if candidates else None
