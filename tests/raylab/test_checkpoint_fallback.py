"""The newest good checkpoint is found whatever Ray names the folders, local or remote."""

from __future__ import annotations

import pyarrow.fs
import pytest
import torch

from raylab import checkpoint as ckpt
from raylab import session
from raylab.run_folder import CHECKPOINT_PREFIX, checkpoint_name

TUNE_NAMES = [checkpoint_name(step) for step in (9, 10, 11)]  # checkpoint_000009 ...
TRAIN_V2_NAMES = [
    CHECKPOINT_PREFIX + stamp
    for stamp in (  # Ray Train v2: a timestamp per checkpoint
        "2026-12-01_07-41-08.720567",
        "2026-12-01_07-41-09.001234",
        "2026-12-01_10-02-00.000001",
    )
]


def write_checkpoints(folder, names):
    for step, name in enumerate(names, start=1):
        ckpt.save(folder / name, {"step": step, "w": torch.full((3,), float(step))})
    (folder / "checkpoint_tmp_5f2a").mkdir()  # a download in progress is never a candidate
    return folder / names[-1]


def corrupt(directory):
    state = directory / ckpt.STATE_FILE
    state.write_bytes(state.read_bytes()[:-7])


@pytest.mark.parametrize("names", [TUNE_NAMES, TRAIN_V2_NAMES], ids=["tune", "train_v2"])
def test_siblings_newest_first_for_each_naming(tmp_path, names):
    newest = write_checkpoints(tmp_path, names)
    assert [p.name for p in ckpt.siblings_newest_first(newest)] == names[::-1]


@pytest.mark.parametrize("names", [TUNE_NAMES, TRAIN_V2_NAMES], ids=["tune", "train_v2"])
def test_corrupted_newest_falls_back_and_is_named(tmp_path, names):
    newest = write_checkpoints(tmp_path, names)
    corrupt(newest)
    with pytest.warns(UserWarning, match=newest.name):
        state, used = ckpt.load_newest_good(str(newest))
    assert state["step"] == 2 and used.endswith(names[1])


def test_remote_storage_downloads_one_candidate_at_a_time(tmp_path):
    """A filesystem that is not the local one (as S3 is) goes through the download path."""
    bucket = tmp_path / "bucket"
    newest = write_checkpoints(bucket / "run" / "trial", TRAIN_V2_NAMES)
    corrupt(newest)
    remote = pyarrow.fs.SubTreeFileSystem(str(bucket), pyarrow.fs.LocalFileSystem())
    with pytest.warns(UserWarning, match=f"run/trial/{newest.name}"):
        state, used = ckpt.load_newest_good(f"run/trial/{newest.name}", remote)
    assert state["step"] == 2 and used == f"run/trial/{TRAIN_V2_NAMES[1]}"


def test_train_worker_restores_from_the_trial_checkpoint_it_was_handed(tmp_path, monkeypatch):
    """On a Ray Train worker with no Train checkpoint, restore() reads the trial's (a resume or
    a PBT donor's) and falls back past a corrupted one."""
    import ray.train

    newest = write_checkpoints(tmp_path / "trial", TUNE_NAMES)
    corrupt(newest)
    monkeypatch.setattr(ray.train, "get_checkpoint", lambda: None)  # no Train run here
    session.start(backend="train", resume=ray.train.Checkpoint(str(newest)))
    try:
        with pytest.warns(UserWarning, match=TUNE_NAMES[-1]):
            assert session.restore()["step"] == 2
    finally:
        session.start()


def test_load_at_reads_a_checkpoint_folder_or_a_trial_folders_newest_good(tmp_path):
    """``load_at``: a checkpoint folder is read as it is; a trial folder's newest good checkpoint
    (the corrupted newest skipped); a folder without checkpoints gives None."""
    trial = tmp_path / "run" / "trial_0"
    newest = write_checkpoints(trial, TUNE_NAMES)
    assert ckpt.load_at(str(trial / TUNE_NAMES[0]))[0]["step"] == 1
    corrupt(newest)
    with pytest.warns(UserWarning, match=newest.name):
        state, used = ckpt.load_at(str(trial))
    assert state["step"] == 2 and used.endswith(TUNE_NAMES[1])
    (tmp_path / "empty").mkdir()
    assert ckpt.load_at(str(tmp_path / "empty")) is None
