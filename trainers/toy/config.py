"""Config of the toy workload: least-squares regression on synthetic data, trained by SGD."""

from __future__ import annotations

from dataclasses import dataclass

from raylab.config import check


@dataclass(frozen=True)
class Config:
    steps: int = 200
    """SGD steps in the trial."""
    report_every: int = 10
    """Steps between reports (and checkpoints, at the experiment's cadence)."""
    lr: float = 0.05
    """SGD learning rate."""
    batch_size: int = 32
    """Samples per step."""
    dim: int = 8
    """Input dimension."""
    noise: float = 0.1
    """Standard deviation of the label noise."""
    seed: int = 0
    """Seed of the data, the initialization and the batch order."""
    step_time_s: float = 0.0
    """Seconds to sleep after each step: makes a trial long enough to interrupt in tests."""
    hold_at_step: int = 0
    """Step after whose report the trial waits until ``release_file`` exists (0: never): holds
    a trial at a known point while a test interrupts the sweep, instead of pacing it by sleeps."""
    release_file: str = ""
    """The file whose existence releases a trial held at ``hold_at_step``."""

    def __post_init__(self):
        check(self.steps >= 1, "steps", f"must be >= 1, got {self.steps}")
        check(self.report_every >= 1, "report_every", f"must be >= 1, got {self.report_every}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        check(self.dim >= 1, "dim", f"must be >= 1, got {self.dim}")
        check(self.noise >= 0, "noise", f"must be >= 0, got {self.noise}")
        check(self.step_time_s >= 0, "step_time_s", f"must be >= 0, got {self.step_time_s}")
        check(self.hold_at_step >= 0, "hold_at_step", f"must be >= 0, got {self.hold_at_step}")
        check(not self.hold_at_step or bool(self.release_file), "release_file", "must be set when hold_at_step is")
