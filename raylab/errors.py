"""The one exception type that reaches the user as a one-line message."""

from __future__ import annotations

import functools
import sys
from typing import Callable


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
    """Decorate a CLI ``main``: a ``UserError`` becomes one line on stderr and exit code 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs) or 0
        except UserError as err:
            message = " ".join(str(err).split("\n"))
            print(f"error: {message}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130

    return wrapper
