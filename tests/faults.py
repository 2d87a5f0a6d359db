"""Fault injection helpers: watch a trial's reports and strike once it has a checkpoint."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable


def trial_rows(run_dir: Path) -> dict[Path, list[dict]]:
    """Rows of every trial's result.json under a run folder, by trial folder."""
    rows = {}
    for result in run_dir.glob("*/result.json"):
        lines = [line for line in result.read_text().splitlines() if line.strip()]
        parsed = []
        for line in lines:
            try:
                parsed.append(json.loads(line))
            except ValueError:  # a row being written right now
                break
        rows[result.parent] = parsed
    return rows


def strike_when(
    run_dir: Path, ready: Callable[[Path, list[dict]], bool], strike: Callable[[Path, list[dict]], None],
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


def has_checkpoint_and_step(min_step: int) -> Callable[[Path, list[dict]], bool]:
    """Ready once the trial reported ``train/step >= min_step`` and saved a checkpoint."""
    return lambda trial_dir, rows: rows[-1].get("train/step", 0) >= min_step and any(
        (p / "meta.json").exists() for p in trial_dir.glob("checkpoint_*")
    )
