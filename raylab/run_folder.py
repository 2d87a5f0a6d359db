"""Files raylab writes into a run folder (local or cloud): experiment.yaml, each trial's config."""

from __future__ import annotations

from pathlib import Path

from raylab import search_space, storage, workloads, yaml_io
from raylab.config import from_dict, to_dict
from raylab.experiment import Experiment

EXPERIMENT_FILE = "experiment.yaml"
RUN_INTERNAL = "_raylab"
FINISHED_FILE = f"{RUN_INTERNAL}/finished.yaml"
"""Written when every trial of a sweep has terminated: ``--resume`` then has nothing to do."""
ENDED_DIR = f"{RUN_INTERNAL}/ended"
"""One empty file per trial whose loop returned (``_raylab/ended/TRIAL_ID``). Tune's saved state
can miss that: when a sweep is killed soon after a trial's function returns, Ray 2.60 may have
saved the trial TERMINATED with a last result that lacks ``done``, and a resume keeps it so."""


def write_text(run_path: str, filename: str, text: str) -> str:
    """Write a file into the run folder, local or on cloud storage; return its path."""
    if not storage.is_uri(run_path):
        target = Path(run_path) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return str(target)
    fs, path = storage.filesystem(run_path)
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/{filename}") as f:
        f.write(text.encode())
    return storage.join(run_path, filename)


def mark_trial_ended(run_path: str, trial_id: str) -> None:
    """Record that trial ``trial_id``'s loop returned (called in the trial, as it ends)."""
    write_text(run_path, f"{ENDED_DIR}/{trial_id}", "")


def trial_ended(run_path: str, trial_id: str) -> bool:
    """Whether trial ``trial_id``'s loop returned, in this run or an earlier run of the sweep."""
    return read_text(run_path, f"{ENDED_DIR}/{trial_id}") is not None


def read_text(run_path: str, filename: str) -> str | None:
    """A file of the run folder (local or on cloud storage), or None when it is not there."""
    if not storage.is_uri(run_path):
        target = Path(run_path) / filename
        return target.read_text() if target.is_file() else None
    import pyarrow.fs

    fs, path = storage.filesystem(run_path)
    if fs.get_file_info(f"{path}/{filename}").type != pyarrow.fs.FileType.File:
        return None
    with fs.open_input_stream(f"{path}/{filename}") as f:
        return f.read().decode()


def run_exists(run_path: str) -> bool:
    """Whether a run folder (local or on cloud storage) already holds anything."""
    if not storage.is_uri(run_path):
        path = Path(run_path)
        return path.exists() and (not path.is_dir() or any(path.iterdir()))
    import pyarrow.fs

    fs, path = storage.filesystem(run_path)
    info = fs.get_file_info(path)
    if info.type == pyarrow.fs.FileType.NotFound:
        return False
    if info.type == pyarrow.fs.FileType.File:
        return True
    return bool(fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True)))


def resolved_config_callback(experiment: Experiment, run_path: str | None = None):
    """A Tune callback that writes each trial's full config (defaults filled) as ``config.yaml``.

    Tune calls ``on_trial_start`` before the trial has created its folder, so the file is
    written with ``write_text``, which creates the folder first. ``run_path`` is the run folder
    (a path or URI); without it the trial's own (local) path is used.
    """
    from ray import tune

    config_cls = workloads.get(experiment.workload).config_class()

    class WriteResolvedConfig(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            config = search_space.with_variant(trial.config)
            resolved = to_dict(from_dict(config_cls, config, experiment.source, "config"))
            trial_name = storage.name_of(trial.path)
            folder = storage.join(run_path, trial_name) if run_path else trial.path
            write_text(folder, "config.yaml", yaml_io.dumps(resolved))

    return WriteResolvedConfig()
