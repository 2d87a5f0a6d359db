"""The one exception type that reaches the user as a one-line message."""

from __future__ import annotations

import errno
import functools
import sys
from typing import Callable

FILESYSTEM_REFUSALS = frozenset(
    {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.EEXIST}
)
"""The ``errno`` values of a filesystem that refuses a write (read-only, full, no permission, a
file where a folder is expected): the user's storage, not a bug, so one line and exit 2."""


def filesystem_refusal(err: BaseException) -> str | None:
    """``PATH: Read-only file system`` for an ``OSError`` in ``FILESYSTEM_REFUSALS``, else None."""
    if not isinstance(err, OSError) or err.errno not in FILESYSTEM_REFUSALS:
        return None
    where = err.filename if err.filename is not None else "storage"
    return f"{where}: {err.strerror or errno.errorcode.get(err.errno, err.errno)}"


class UserError(Exception):
    """A mistake in what the user gave us (a file, a key, a value, an address).

    The command-line entry points print it as ``error: <message>`` and exit with code 2,
    without a traceback. The message names where the problem is (file, key, value).
    """


class ThisMachine(UserError):
    """A refusal about this machine's own resources (its memory now), not about the config.

    A plan for a cluster (``--dry-run --cluster``) does not count it against the run: trials
    run on the cluster's nodes, whose declared memory the plan checks itself."""


def exit_on_user_error(main: Callable[..., int | None]) -> Callable[..., int]:
    """Decorate a CLI ``main``: a ``UserError``, or a filesystem's refusal to be written
    (``filesystem_refusal``), becomes one line on stderr and exit code 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs) or 0
        except UserError as err:
            message = " ".join(str(err).split("\n"))
            print(f"error: {message}", file=sys.stderr)
            return 2
        except OSError as err:
            message = filesystem_refusal(err)
            if message is None:
                raise
            print(f"error: {message}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130

    return wrapper
