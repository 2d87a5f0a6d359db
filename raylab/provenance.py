"""Where a run came from: the code's git commit, the command line, package versions, host,
start and end.

Saved under ``provenance:`` in the run folder's ``experiment.yaml``, shown in the report's
facts box and sent to the trackers (``raylab.launch.trackers.payload``).
"""

from __future__ import annotations

import datetime
import platform
import shlex
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

CORE_PACKAGES = ("raylab", "ray", "torch", "numpy", "pyarrow")


def now() -> str:
    """The current time, UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def git_state(folder: Path) -> dict[str, Any]:
    """``{commit, dirty}`` of the git checkout holding ``folder``; ``{}`` outside one.

    ``dirty`` counts tracked files changed since the commit (untracked files do not count)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": commit, "dirty": bool(changed)}


def versions(packages: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed versions of raylab's core packages and ``packages`` (absent ones left out)."""
    out = {}
    for name in dict.fromkeys((*CORE_PACKAGES, *packages)):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def command_line(argv: list[str] | None = None) -> str:
    """The command line that started this process, as a shell would retype it:
    ``python -m raylab.tune toy --smoke`` for a module run, else the script and its arguments."""
    argv = list(sys.argv if argv is None else argv)
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and argv and argv[0].endswith(".py"):
        module = spec.name.removesuffix(".__main__")
        return shlex.join(["python", "-m", module, *argv[1:]])
    return shlex.join(argv)


def record(code_folder: Path, packages: tuple[str, ...] = ()) -> dict[str, Any]:
    """The provenance of a run starting now, for the workload whose code is in ``code_folder``."""
    return {
        "git": git_state(code_folder),
        "command_line": command_line(),
        "versions": versions(packages),
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "started": now(),
        "ended": None,
    }


def of_workload(workload) -> dict[str, Any]:
    """``record`` for a ``raylab.workloads.Workload``: the git checkout of its train loop's
    module, and its declared key packages."""
    import importlib.util

    spec = importlib.util.find_spec(workload.loop.partition(":")[0])
    folder = Path(spec.origin).parent if spec and spec.origin else Path.cwd()
    return record(folder, workload.packages)


def facts(saved: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The report's facts-box rows for a saved ``provenance`` mapping."""
    if not saved:
        return [("provenance", "not recorded (run started by an older raylab)")]
    git = saved.get("git") or {}
    commit = (
        f"{git['commit'][:12]}{' (uncommitted changes)' if git.get('dirty') else ''}"
        if git.get("commit")
        else "not a git checkout"
    )
    return [
        ("code", commit),
        ("versions", ", ".join(f"{k} {v}" for k, v in (saved.get("versions") or {}).items())),
        ("host", saved.get("host", "?")),
        ("started", saved.get("started", "?")),
        ("ended", saved.get("ended") or "not ended (interrupted or running)"),
        *((("notes", saved["notes"]),) if saved.get("notes") else ()),
        *((("tags", ", ".join(saved["tags"])),) if saved.get("tags") else ()),
    ]
