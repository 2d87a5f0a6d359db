"""Fault injection helpers: watch a trial's reports and strike once it has a checkpoint."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from raylab import checkpoint as ckpt
from raylab.run_folder import RunFolder, TrialFolder


def trial_rows(run_dir: Path) -> dict[TrialFolder, list[dict]]:
    """The rows every trial of a run folder reported so far, by trial folder."""
    return {trial: trial.rows() for trial in RunFolder(run_dir).trials()}


def strike_when(
    run_dir: Path,
    ready: Callable[[TrialFolder, list[dict]], bool],
    strike: Callable[[TrialFolder, list[dict]], None],
    timeout_s: float = 300,
) -> threading.Thread:
    """In a background thread: once ``ready(trial_dir, rows)`` holds for a trial, ``strike`` it."""

    def watch():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for trial_dir, rows in trial_rows(run_dir).items():
                if rows and ready(trial_dir, rows):
                    strike(trial_dir, rows)
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def saved_checkpoints(trial: TrialFolder) -> list[Path]:
    """The trial's checkpoints written whole (their ``meta.json`` is written last), newest first."""
    return [path for path in trial.checkpoint_paths() if (path / ckpt.META_FILE).exists()]


def has_checkpoint_and_step(min_step: int) -> Callable[[TrialFolder, list[dict]], bool]:
    """Ready once the trial reported ``train/step >= min_step`` and saved a checkpoint."""
    return lambda trial, rows: rows[-1].get("train/step", 0) >= min_step and bool(saved_checkpoints(trial))
