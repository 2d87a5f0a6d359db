"""Where results live: a run folder (a local path or a URI), the files raylab keeps in it, the
newest run of an experiment, and a trial's status.

A run folder is what ``python -m raylab.tune`` (one folder per Tune trial) or
``python -m raylab.train`` (one ``trial/`` folder) writes under ``--storage``::

    experiment.yaml          the experiment as it ran, with its provenance
    summary.csv              the end-of-sweep table
    best.yaml                the best trial: its config, metric value and checkpoint
    _raylab/finished.yaml    every trial reached its end: ``--resume`` has nothing to do
    _raylab/ended/TRIAL_ID   one empty file per trial whose loop returned
    TRIAL/                   one ``TrialFolder`` per trial:
        params.json          the trial's config as Tune (or the local backend) gave it
        result.json          one JSON row per report
        error.txt            why it failed, when it did
        config.yaml          its full config, the workload's defaults filled in
        checkpoint_*/        its checkpoints (``raylab.checkpoint``'s format)

Every reader and writer of these names goes through ``RunFolder`` and ``TrialFolder``: no other
module spells them (``tests/raylab/test_run_folder.py`` checks). Readers of a run take its trials
from ``RunFolder.read_trials`` (``Trial``: config, rows, status, error, checkpoints, and the one
definition of ``finished``). This module knows files, not the experiment spec: the spec writes
and reads its ``experiment.yaml`` itself (``raylab.experiment``). Local folders and URIs
(``s3://``, ``gs://``, ``file://``, with a ``?query`` of pyarrow filesystem options kept last)
are read and written the same way; the location algebra on them (``join``, ``parent``,
``name_of``, ``filesystem``) is at the end of this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raylab import yaml_io
from raylab.config import VARIANT
from raylab.errors import UserError
from raylab.files import is_uri

EXPERIMENT_FILE = "experiment.yaml"
SUMMARY_FILE = "summary.csv"
BEST_FILE = "best.yaml"
"""The sweep's best trial as a script reads it (as Tune's ``ResultGrid.get_best_result`` or
Optuna's ``best_params`` give it): ``trial``, ``metric``, ``mode``, ``value``, ``config``,
``checkpoint`` (a path or URI, or null), ``iteration``; written when a sweep ends."""
RUN_INTERNAL = "_raylab"
FINISHED_FILE = f"{RUN_INTERNAL}/finished.yaml"
"""Written when every trial of a sweep has terminated: ``--resume`` then has nothing to do."""
ENDED_DIR = f"{RUN_INTERNAL}/ended"
CLAIM_FILE = f"{RUN_INTERNAL}/claimed"
"""Created exclusively by the command that starts a new run, before Ray starts
(``RunFolder.claim``): one run per folder."""
"""One empty file per trial whose loop returned (``_raylab/ended/TRIAL_ID``). Tune's saved state
can miss that: when a sweep is killed soon after a trial's function returns, Ray 2.60 may have
saved the trial TERMINATED with a last result that lacks ``done``, and a resume keeps it so."""
TUNE_RUN = "raylab.tune"
"""``provenance.command`` of a sweep (``python -m raylab.tune``)."""
TRAIN_RUN = "raylab.train"
"""``provenance.command`` of a ``python -m raylab.train`` run."""
TRAIN_TRIAL = "trial"
"""The one trial folder of a ``python -m raylab.train`` run."""

PARAMS_FILE = "params.json"
RESULT_FILE = "result.json"
ERROR_FILE = "error.txt"
CONFIG_FILE = "config.yaml"
CHECKPOINT_PREFIX = "checkpoint_"
"""A trial's files (see the module docstring), and the start of its checkpoint folders' names."""

TUNE_STATE_PREFIX = "experiment_state-"
"""The start of Tune's saved experiment state files' names (``experiment_state-DATE.json``)."""

LIVE_STATUSES = ("RUNNING", "PENDING", "PAUSED")
"""Tune's words for a trial that has not reached its end yet, in a sweep still running."""


def trial_status(reported: bool, done: bool, error: bool, ended: bool = False, tune_status: str | None = None) -> str:
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


def _now() -> str:
    """The current time, UTC, ISO 8601 to the second (``raylab.provenance.now``'s format)."""
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Trial:
    """One trial of a run, as its folder (and Tune's saved state) shows it now: what every reader
    of a run (the report, ``raylab.runs``, a workload's own tables) gets from
    ``RunFolder.read_trials``."""

    name: str
    """The trial folder's name."""
    config: dict[str, Any]
    """The trial's config as Tune gave it (``params.json``), the fields of its ``variant`` group
    (a ``search.variant`` grid point) merged in; the ``variant`` key stays, naming the group."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    """Its reports, oldest first (``result.json``; Tune's ``config`` copy in each row dropped)."""
    status: str = "NO RESULTS"
    """``trial_status``: TERMINATED, ERROR, RUNNING, PENDING, PAUSED (a live sweep's, from Tune's
    state), STOPPED or NO RESULTS."""
    error: str = ""
    """The first line of ``error.txt`` (the actual exception after Ray's wrapper lines); empty
    when there is none."""
    checkpoints: tuple[str, ...] = ()
    """The names of its checkpoint folders, oldest first."""

    @property
    def last(self) -> dict[str, Any]:
        """Its last reported row; ``{}`` before the first."""
        return self.rows[-1] if self.rows else {}

    @property
    def finished(self) -> bool:
        """Whether its loop returned without an error: status TERMINATED (its last row says
        ``done``, or its ``_raylab/ended`` marker is there). The one definition of finished."""
        return self.status == "TERMINATED"

    def reported(self) -> set[str]:
        """Every metric name this trial reported at least once."""
        return {key for row in self.rows for key in row}


class RunFolder:
    """One run folder, local or on cloud storage: its name, its files, its markers."""

    def __init__(self, location: str | os.PathLike):
        self.location = root(str(location))
        """An absolute local path, or the URI as given (its ``?query`` last)."""

    @classmethod
    def under(cls, storage_root: str, name: str) -> RunFolder:
        """The run folder ``name`` under ``--storage`` (a path or a URI)."""
        return cls(join(root(storage_root), name))

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
        return name_of(self.location)

    @property
    def storage_root(self) -> str:
        """The ``--storage`` root that holds the folder (what Tune's ``storage_path`` is)."""
        return parent(self.location)

    @property
    def is_uri(self) -> bool:
        return is_uri(self.location)

    def join(self, *parts: str) -> str:
        """A path or URI inside the folder (a URI's ``?query`` kept last)."""
        return join(self.location, *parts)

    # -------------------------------------------------------------------- files

    def _fs(self):
        import pyarrow

        try:
            fs, path = filesystem(self.location)
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
        return sorted((e.base_name, "dir" if e.type == pyarrow.fs.FileType.Directory else "file") for e in entries)

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

    def upload(self, local_folder: str | os.PathLike, relative: str) -> str:
        """Copy the files of a local folder (a checkpoint written on this node) into ``relative``
        of the folder, one object each on a bucket; return its path or URI."""
        import pyarrow.fs

        fs, path = self._path(relative)
        fs.create_dir(path, recursive=True)
        local = pyarrow.fs.LocalFileSystem()
        pyarrow.fs.copy_files(str(local_folder), path, source_filesystem=local, destination_filesystem=fs)
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

    def claim(self) -> None:
        """Claim a new run's folder for this command before Ray starts: ``_raylab/claimed``
        created exclusively (``O_EXCL``), so that of two sweeps started with the same new
        ``--name`` a second apart, the second is refused in one line instead of writing its
        trials into the first one's folder. A bucket has no exclusive create; there the name
        check (``raylab.launch.checks.check_run_name``) is the guard."""
        if self.is_uri:
            return
        target = Path(self.location, CLAIM_FILE)
        made = [folder for folder in target.parents if not folder.exists()]
        target.parent.mkdir(parents=True, exist_ok=True)
        self._claimed = [target, *made]  # what ``release`` removes again
        try:
            with open(target, "x") as f:
                f.write(f"{_now()} pid {os.getpid()}\n")
        except FileExistsError:
            raise UserError(
                f"--name {self.name}: another run has just started in {self.location}; choose another name"
            ) from None

    def release(self) -> None:
        """Undo ``claim`` for a run that never began (Ray could not start): the claim file and
        the folders it made, where they are still empty."""
        for path in getattr(self, "_claimed", []):
            with contextlib.suppress(OSError):
                path.rmdir() if path.is_dir() else path.unlink()
        self._claimed = []

    def record(self, *, ended: str | None = None, resumed: str | None = None) -> None:
        """Record in ``experiment.yaml``'s provenance when the run ended, or that it resumed."""
        saved = self.experiment()
        if saved is None or not isinstance(saved.get("provenance"), dict):
            return
        record = saved["provenance"]
        if ended:
            record["ended"] = ended
        if resumed:
            record["resumed"] = [*record.get("resumed", []), resumed]
            record["ended"] = None
        self.write_text(EXPERIMENT_FILE, yaml_io.dumps(saved))

    def source_changed(self, current_file: str | os.PathLike) -> bool:
        """Whether the experiment file ``current_file`` differs from the one this run started
        from (its digest in the provenance; a run older than that record never differs)."""
        saved = self.experiment() or {}
        record = saved.get("provenance") if isinstance(saved.get("provenance"), dict) else {}
        started = record.get(SOURCE_DIGEST)
        return bool(started) and file_digest(current_file) != started

    def write_best(self, best: dict[str, Any]) -> str:
        """Write ``best.yaml`` (``BEST_FILE``); return its path or URI."""
        return self.write_text(BEST_FILE, yaml_io.dumps(best))

    def best(self) -> dict[str, Any] | None:
        """The saved best trial (``best.yaml``), or None when the run has none (yet)."""
        text = self.read_text(BEST_FILE)
        try:
            saved = yaml_io.loads(text, self.join(BEST_FILE)) if text is not None else None
        except UserError:
            return None
        return saved if isinstance(saved, dict) else None

    # -------------------------------------------------------------------- its trials

    def trial(self, name: str) -> TrialFolder:
        """The folder of trial ``name`` (Tune's trial folder name; ``trial`` for ``raylab.train``)."""
        return TrialFolder(self, name)

    def read_trials(self) -> list[Trial]:
        """Every trial of the run as it stands now (``Trial``): the trial folders by name, then
        the trials Tune's saved state knows that have no folder yet (PENDING)."""
        states = self._tune_states()
        ended = self.ended_trials()
        trials = [folder.read(states.pop(folder.name, None), ended) for folder in self.trials()]
        for name, state in sorted(states.items()):  # known to Tune, no folder yet
            status = trial_status(False, False, False, tune_status=state.get("status") or "PENDING")
            trials.append(Trial(name=name, config=merged_variant(state.get("params", {})), status=status))
        return trials

    def tune_state_names(self) -> list[str]:
        """Tune's saved ``experiment_state-*.json`` files in the folder, oldest first."""
        return sorted(n for n, k in self.listdir() if k == "file" and n.startswith(TUNE_STATE_PREFIX))

    def _tune_states(self) -> dict[str, dict]:
        """Trial statuses and configs from Tune's newest ``experiment_state-*.json`` (read as
        JSON, not pickle), by trial folder name."""
        names = self.tune_state_names()
        if not names:
            return {}
        try:
            data = json.loads(self.read_text(names[-1]) or "{}")
        except (json.JSONDecodeError, OSError):
            return {}
        states = {}
        for entry in data.get("trial_data", []) if isinstance(data, dict) else []:
            try:
                info = json.loads(entry[0]) if isinstance(entry[0], str) else entry[0]
            except (json.JSONDecodeError, IndexError, TypeError):
                continue
            if isinstance(info, dict) and info.get("relative_logdir"):
                config = info.get("config") if isinstance(info.get("config"), dict) else {}
                states[info["relative_logdir"]] = {"status": info.get("status"), "params": config}
        return states

    def trials(self) -> list[TrialFolder]:
        """The trial folders the run holds now, by name: folders with a config, a result or an
        error file (not raylab's ``_raylab``, not Tune's own files)."""
        found = []
        for name, kind in self.listdir():
            if kind == "dir" and not name.startswith(("_", ".")) and not is_checkpoint_name(name):
                trial = self.trial(name)
                if trial.is_trial():
                    found.append(trial)
        return found


SOURCE_DIGEST = "experiment_file_sha256"
"""The provenance key of the experiment file's digest when the run started."""


def file_digest(path: str | os.PathLike) -> str | None:
    """The SHA-256 of a local file's bytes; None when it cannot be read."""
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def is_train_run(saved: dict, folder_name: str) -> bool:
    """Whether a saved experiment is a ``python -m raylab.train`` run's (its provenance says
    so; runs older than that record are known by their ``NAME-train-`` folder name)."""
    command = (saved.get("provenance") or {}).get("command") if isinstance(saved.get("provenance"), dict) else None
    if command:
        return command == TRAIN_RUN
    return folder_name.startswith(f"{saved.get('name')}-train")


def runs_under(storage_root: str) -> list[tuple[RunFolder, dict, int]]:
    """Every run folder directly under ``storage_root`` (a path or a URI): ``(run, its saved
    experiment.yaml, when that file last changed in ns)``, by name; folders without a readable
    ``experiment.yaml`` are not runs; ``[]`` when ``storage_root`` is not a folder."""
    import pyarrow.fs

    root = RunFolder(storage_root)
    if root.kind() != "dir":
        return []
    fs, base = root._fs()
    found = []
    for name, kind in root.listdir():
        if kind != "dir":
            continue
        run = RunFolder(root.join(name))
        saved = run.experiment()
        if saved is None:
            continue
        try:
            info = fs.get_file_info(f"{base}/{name}/{EXPERIMENT_FILE}")
        except OSError:
            continue
        found.append((run, saved, info.mtime_ns if info.type == pyarrow.fs.FileType.File and info.mtime_ns else 0))
    return found


def newest_run(
    storage_root: str, experiment: str, *, smoke: bool | None = None, train: bool | None = False, keep=None
) -> RunFolder | None:
    """The newest run of ``experiment`` under ``storage_root`` (a path or a URI), or None.

    The runs are the folders whose saved ``experiment.yaml`` names ``experiment``; ``smoke``
    (True or False) keeps only smoke or only full runs, ``train`` only ``python -m raylab.train``
    runs (True) or only sweeps (False; None keeps both), and ``keep(run)`` any further choice
    (unfinished, restorable). Newest is the run whose ``experiment.yaml`` changed last: a
    sweep rewrites it as it starts, resumes and ends.
    """
    candidates = []
    for run, saved, changed in runs_under(storage_root):
        if saved.get("name") != experiment:
            continue
        if smoke is not None and bool(saved.get("smoke")) != smoke:
            continue
        if train is not None and is_train_run(saved, run.name) != train:
            continue
        if keep is not None and not keep(run):
            continue
        candidates.append((changed, run.name, run))
    return max(candidates, key=lambda c: c[:2])[2] if candidates else None


class TrialFolder:
    """One trial's folder of a run: its config (``params.json``), its rows (``result.json``),
    its failure (``error.txt``), its full config (``config.yaml``) and its checkpoints.

    Ray Tune writes the first three and the checkpoints of a sweep's trials; raylab's local
    backend (``python -m raylab.train``) writes the same files the same way, and raylab's
    config writer adds ``config.yaml``. Local folders and URIs alike, through the ``RunFolder``.
    """

    def __init__(self, run: RunFolder, name: str):
        self.run = run
        self.name = name

    @classmethod
    def at(cls, location: str | os.PathLike) -> TrialFolder:
        """The trial folder at ``location`` (a path or URI; its run is the folder above it)."""
        location = root(str(location))
        return cls(RunFolder(parent(location)), name_of(location))

    def __repr__(self) -> str:
        return f"TrialFolder({self.location!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, TrialFolder) and (other.run, other.name) == (self.run, self.name)

    def __hash__(self) -> int:
        return hash((self.run, self.name))

    @property
    def location(self) -> str:
        """The folder's absolute local path, or its URI (a ``?query`` kept last)."""
        return self.run.join(self.name)

    @property
    def path(self) -> Path:
        """The folder as a local ``Path`` (a trial of a local run only)."""
        if self.run.is_uri:
            raise ValueError(f"{self.location} is not a local folder")
        return Path(self.location)

    def join(self, *parts: str) -> str:
        """A path or URI inside the trial folder."""
        return self.run.join(self.name, *parts)

    def _file(self, name: str) -> str:
        return f"{self.name}/{name}"

    def is_trial(self) -> bool:
        """Whether the folder holds a trial's config, rows or error (Tune made it a trial)."""
        inside = dict(self.run.listdir(self.name))
        return any(inside.get(name) == "file" for name in (PARAMS_FILE, RESULT_FILE, ERROR_FILE))

    def read(self, tune_state: dict | None = None, ended: frozenset[str] = frozenset()) -> Trial:
        """The trial as its folder shows it now (``Trial``); ``tune_state`` (``{status, params}``
        from Tune's saved state) fills a missing ``params.json`` and gives a live sweep's status,
        ``ended`` the run's ``ended_trials`` (Tune's trial ids; a ``python -m raylab.train`` trial
        is marked by its folder's name)."""
        params = self.params()
        if not params and tune_state:
            params = tune_state.get("params", {})
        rows = self.rows()
        for row in rows:
            row.pop("config", None)
        text = self.error()
        error = "" if text is None else error_line([line.strip() for line in text.splitlines() if line.strip()])
        last = rows[-1] if rows else {}
        status = trial_status(
            bool(rows),
            bool(last.get("done")),
            bool(error),
            last.get("trial_id") in ended or self.name in ended,
            tune_status=(tune_state or {}).get("status"),
        )
        return Trial(self.name, merged_variant(params), rows, status, error, tuple(self.checkpoints()))

    # -------------------------------------------------------------------- params.json

    def params(self) -> dict[str, Any]:
        """The trial's config as Tune gave it; ``{}`` when missing or not (yet) valid JSON."""
        text = self.run.read_text(self._file(PARAMS_FILE))
        try:
            params = json.loads(text) if text is not None else {}
        except json.JSONDecodeError:
            return {}
        return params if isinstance(params, dict) else {}

    def write_params(self, config: dict[str, Any]) -> None:
        self.run.write_text(self._file(PARAMS_FILE), json.dumps(config, indent=2))

    # -------------------------------------------------------------------- result.json

    def rows(self) -> list[dict[str, Any]]:
        """Every reported row, oldest first (a line still being written is skipped)."""
        text = self.run.read_text(self._file(RESULT_FILE))
        rows = []
        for line in (text or "").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def append_row(self, row: dict[str, Any]) -> None:
        """Add one reported row (the local backend's report)."""
        line = json.dumps(row) + "\n"
        if self.run.is_uri:
            self.run.write_text(self._file(RESULT_FILE), (self.run.read_text(self._file(RESULT_FILE)) or "") + line)
            return
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / RESULT_FILE, "a") as f:
            f.write(line)

    def write_rows(self, rows: list[dict[str, Any]]) -> None:
        """Replace the reported rows with ``rows``."""
        self.run.write_text(self._file(RESULT_FILE), "".join(json.dumps(row) + "\n" for row in rows))

    # -------------------------------------------------------------------- error.txt

    def error(self) -> str | None:
        """Why the trial failed (Tune's ``error.txt``: every failure's traceback), or None."""
        return self.run.read_text(self._file(ERROR_FILE))

    @property
    def error_location(self) -> str:
        """Where the trial's ``error.txt`` is (or would be), a path or URI."""
        return self.join(ERROR_FILE)

    def write_error(self, text: str) -> None:
        """Write ``error.txt`` as Tune does for a failed trial."""
        self.run.write_text(self._file(ERROR_FILE), text)

    # -------------------------------------------------------------------- config.yaml

    def config(self) -> dict[str, Any] | None:
        """The trial's full config (the workload's defaults filled in), or None before it started."""
        text = self.run.read_text(self._file(CONFIG_FILE))
        return yaml_io.loads(text, self.join(CONFIG_FILE)) if text is not None else None

    def write_config(self, resolved: dict[str, Any]) -> None:
        self.run.write_text(self._file(CONFIG_FILE), yaml_io.dumps(resolved))

    # -------------------------------------------------------------------- checkpoints

    def checkpoints(self) -> list[str]:
        """The names of the trial's checkpoint folders, oldest first (``checkpoint_order``)."""
        names = [name for name, kind in self.run.listdir(self.name) if kind == "dir" and is_checkpoint_name(name)]
        return sorted(names, key=checkpoint_order)

    def checkpoint_paths(self) -> list[Path]:
        """The local paths of the trial's checkpoint folders, newest first."""
        return [self.path / name for name in reversed(self.checkpoints())]

    def checkpoint_path(self, number: int) -> Path:
        """Where the local backend writes its ``number``-th checkpoint (``checkpoint_NNNNNN``)."""
        return self.path / checkpoint_name(number)

    def last_checkpoint_number(self) -> int:
        """The highest ``checkpoint_NNNNNN`` in the folder, 0 when there is none."""
        numbers = [
            int(name[len(CHECKPOINT_PREFIX) :])
            for name in self.checkpoints()
            if name[len(CHECKPOINT_PREFIX) :].isdigit()
        ]
        return max(numbers, default=0)

    def prune_checkpoints(self, keep: int | None) -> None:
        """Delete all but the newest ``keep`` checkpoints (None keeps all)."""
        if keep is None:
            return
        for name in self.checkpoints()[:-keep] if keep else self.checkpoints():
            self.run.remove(self._file(name))


def merged_variant(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's config with the fields of its ``variant`` group merged in, the group kept (a
    reader groups trials by it; ``raylab.config.with_variant`` drops it for the loop)."""
    group = params.get(VARIANT)
    return {**params, **group} if isinstance(group, dict) else params


def error_line(lines: list[str]) -> str:
    """The first line of ``error.txt``; Ray's own wrapper lines skipped for the actual exception."""
    if not lines:
        return f"(empty {ERROR_FILE})"
    for line in lines:
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", line) and "ray::" not in line:
            return f"{lines[0]} ... {line}" if line != lines[0] else line
    return lines[0]


def checkpoint_name(number: int) -> str:
    """``checkpoint_000012``: the name Tune and the local backend give a trial's checkpoint."""
    return f"{CHECKPOINT_PREFIX}{number:06d}"


def is_checkpoint_name(name: str) -> bool:
    """A folder Ray or raylab wrote a checkpoint into (not a download or upload in progress)."""
    return name.startswith(CHECKPOINT_PREFIX) and "tmp" not in name


def checkpoint_order(name: str) -> list:
    """Sort key of a checkpoint folder name: digit runs compare as numbers.

    Tune names checkpoints ``checkpoint_000012``, Ray Train v2 ``checkpoint_2026-12-01_07-41-08
    .720567``; both sort oldest to newest under this key.
    """
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]


# ------------------------------------------------------------------------ locations
#
# A run folder's location is a local path or a URI; a URI may carry pyarrow filesystem options
# as a query string, for S3-compatible stores (MinIO, Ceph, a lab's own store)::
#
#     s3://bucket/runs?endpoint_override=http://10.0.0.5:9000&scheme=http
#
# ``join`` keeps that query string at the end when a run name or a file name is appended, so
# every path raylab and Ray derive from ``--storage`` reaches the same store.


def root(location: str) -> str:
    """``location`` as an absolute local path, or the URI as given."""
    return location if is_uri(location) else str(Path(location).expanduser().absolute())


def join(base: str, *parts: str) -> str:
    """``base/part/...``; on a URI the parts go into the path, before any ``?query``.

    >>> join("s3://b/runs?endpoint_override=http://127.0.0.1:9000", "run-1", "x.yaml")
    's3://b/runs/run-1/x.yaml?endpoint_override=http://127.0.0.1:9000'
    """
    path, sep, query = base.partition("?") if is_uri(base) else (base, "", "")
    for part in parts:
        path = f"{path.rstrip('/')}/{part.strip('/')}"
    return f"{path}{sep}{query}"


def filesystem(location: str):
    """The pyarrow filesystem of a local folder or a URI, and the path on it.

    A URI's ``?query`` configures the filesystem (``pyarrow.fs.FileSystem.from_uri``); a local
    path comes back absolute. A URI holding credentials is refused (``files.refuse_credentials``)."""
    import pyarrow.fs

    from raylab.files import refuse_credentials

    if is_uri(location):
        refuse_credentials(location, "storage")
        return pyarrow.fs.FileSystem.from_uri(location)
    return pyarrow.fs.LocalFileSystem(), root(location)


def name_of(location: str) -> str:
    """The last path element of a location (a run folder's run name), query string ignored."""
    path = location.partition("?")[0] if is_uri(location) else location
    return path.rstrip("/").rsplit("/", 1)[-1]


def parent(location: str) -> str:
    """The folder that holds ``location`` (a run folder's storage root), a URI's query kept.

    >>> parent("s3://b/runs/run-1?endpoint_override=http://127.0.0.1:9000")
    's3://b/runs?endpoint_override=http://127.0.0.1:9000'
    """
    path, sep, query = location.partition("?") if is_uri(location) else (location, "", "")
    return f"{path.rstrip('/').rsplit('/', 1)[0]}{sep}{query}"
