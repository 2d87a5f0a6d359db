"""toy's train loop whose checkpoint writes find the disk full: ``raylab.checkpoint.save`` writes
into ``/dev/full``, so each write fails with the kernel's own ENOSPC at the real write site (no
filesystem is mounted). Each attempt adds a line to ``attempts.txt`` in the folder the sweep was
started from (a disk with room).

Ray workers import it as ``tests.raylab.launch.disk_full_loop``.
"""

from __future__ import annotations

import os

from raylab import checkpoint
from raylab.files import LAUNCH_DIR_ENV
from trainers.toy.loop import train_loop as toy_loop


def save_on_a_full_disk(directory, state):
    os.makedirs(directory, exist_ok=True)
    with open("/dev/full", "wb") as out:  # what a write to a full disk gets
        out.write(b"\0" * 65536)
        out.flush()
    raise AssertionError("/dev/full took the bytes")


def train_loop(config: dict) -> None:
    with open(os.path.join(os.environ[LAUNCH_DIR_ENV], "attempts.txt"), "a") as f:
        f.write(f"{os.getpid()}\n")
    checkpoint.save = save_on_a_full_disk
    toy_loop(config)
