"""A full disk during a sweep: the sweep stops at once, in one line naming the folder, instead of
restarting trials that would fail the same way and ending in a traceback.

A trial whose write fails with ENOSPC (a checkpoint, its rows) fails; Tune would restart it up to
``failure.max_failures`` times. ``callback`` sees the failure in the driver and ends the sweep
before the restart runs (Tune saves its state as for an interrupted sweep, so ``--resume``
continues it once there is room); a write of the driver's own (Tune's experiment state) that
fails with ENOSPC ends it the same way. Either is a ``DiskFull`` error, one line.
"""

from __future__ import annotations

import errno
import re

from raylab.errors import UserError

NO_SPACE = "No space left on device"
"""``os.strerror(errno.ENOSPC)`` on Linux and macOS: how the failure reads in a trial's error text."""
_WHERE = re.compile(r"No space left on device[^\n]*?: '([^'\n]+)'")


class DiskFull(UserError):
    """The sweep stopped because a disk is full; the message names the folder, in one line."""


def is_disk_full(err: BaseException | None) -> bool:
    """Whether ``err``, or an exception it was raised from, is a write that found no space."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            return True
        if NO_SPACE in str(err):  # a wrapper that kept only the text (Ray's, pyarrow's)
            return True
        err = err.__cause__ or err.__context__
    return False


def where(text: str) -> str | None:
    """The path a disk-full error text names (``...: '/path'``), if it names one."""
    found = _WHERE.search(text or "")
    return found.group(1) if found else None


def message(run_location: str, text: str) -> str:
    """The one line: the run folder, and the path that could not be written when it differs."""
    path = where(text)
    writing = f" (writing {path})" if path and not path.startswith(run_location) else ""
    return f"the disk holding the run folder {run_location} is full{writing}: {NO_SPACE}; the sweep stopped"


def callback(run_location: str):
    """A Tune callback that ends the sweep (a ``DiskFull`` raised from ``tuner.fit``) when a
    trial fails for lack of space, before Tune restarts it."""
    from ray import tune

    class StopWhenDiskFull(tune.Callback):
        def _check(self, trial) -> None:
            try:
                with open(trial.error_file) as f:
                    text = f.read()
            except (OSError, TypeError):  # none written: Tune's own write failed, seen in fit()
                text = ""
            if NO_SPACE in text:
                raise DiskFull(message(run_location, text))

        def on_trial_recover(self, iteration, trials, trial, **info):
            self._check(trial)

        def on_trial_error(self, iteration, trials, trial, **info):
            self._check(trial)

    return StopWhenDiskFull()
