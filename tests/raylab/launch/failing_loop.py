"""A train loop that reports one row with a checkpoint and then fails, on every attempt.

Ray workers import it as ``tests.raylab.launch.failing_loop`` (the driver's working directory,
the repository root, is on their path).
"""

import os

from raylab import session


def train_loop(config: dict) -> None:
    restored = session.restore()
    attempt = 1 + (restored["attempt"] if restored else 0)
    session.report(
        {"train/loss": 1.0, "train/step": attempt, "attempt_pid": os.getpid()},
        state={"attempt": attempt},
        checkpoint=True,
    )
    raise RuntimeError(f"injected failure on attempt {attempt}")
